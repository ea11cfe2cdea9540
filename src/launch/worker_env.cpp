// Values and spellings copied from torchrun's LocalElasticAgent._start_workers (torch 2.11), checked by
// running `torchrun --no-python env` side by side (docs/launcher.md).
#include "meshtrain/launch/worker_env.h"

#include <unistd.h>  // environ (GNU), declared once for every file of a unity batch

#include <sstream>

namespace meshtrain::launch {
namespace {

// The GPU a worker sees as device 0 under --virtual-local-rank.
std::string virtual_device(int local_rank, const std::map<std::string, std::string>& inherited) {
  auto cvd = inherited.find("CUDA_VISIBLE_DEVICES");
  if (cvd == inherited.end()) return std::to_string(local_rank);
  std::vector<std::string> gpus;
  std::stringstream ss(cvd->second);
  for (std::string g; std::getline(ss, g, ',');) gpus.push_back(g);
  if (gpus.empty()) return cvd->second;
  return gpus[static_cast<size_t>(local_rank) % gpus.size()];
}

}  // namespace

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::map<std::string, std::string> worker_env_overrides(const WorkerIdentity& w,
                                                        const std::map<std::string, std::string>& inherited) {
  std::map<std::string, std::string> o;
  o["RANK"] = std::to_string(w.rank());
  o["LOCAL_RANK"] = std::to_string(w.local_rank);
  o["WORLD_SIZE"] = std::to_string(w.world_size());
  o["LOCAL_WORLD_SIZE"] = std::to_string(w.local_world_size);
  o["GROUP_RANK"] = std::to_string(w.group_rank);
  o["GROUP_WORLD_SIZE"] = std::to_string(w.group_world_size);
  // One role per run: role rank and size equal the global ones (as torchrun with a single role).
  o["ROLE_RANK"] = std::to_string(w.rank());
  o["ROLE_WORLD_SIZE"] = std::to_string(w.world_size());
  o["ROLE_NAME"] = w.role;
  o["MASTER_ADDR"] = w.master_addr;
  o["MASTER_PORT"] = std::to_string(w.master_port);
  o["TORCHELASTIC_RESTART_COUNT"] = std::to_string(w.restart_count);
  o["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(w.max_restarts);
  o["TORCHELASTIC_RUN_ID"] = w.run_id;
  // "True" (Python's str(True)): the store is hosted by the launcher, workers connect as clients only.
  o["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  o["TORCHELASTIC_ERROR_FILE"] = w.error_file;
  o["TORCHELASTIC_SIGNALS_TO_HANDLE"] = w.signals_to_handle;
  // meshrun prefixes every console line with "[rank N]: "; meshtrain's logger then leaves out its own.
  o["MESHRUN_PREFIXES_OUTPUT"] = "1";
  auto nccl = inherited.find("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  o["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = nccl != inherited.end() ? nccl->second : "1";
  auto omp = inherited.find("OMP_NUM_THREADS");
  if (omp != inherited.end())
    o["OMP_NUM_THREADS"] = omp->second;
  else if (w.local_world_size > 1)
    o["OMP_NUM_THREADS"] = "1";  // torchrun: avoid N workers × all cores of OpenMP threads
  if (w.virtual_local_rank) {
    o["LOCAL_RANK"] = "0";
    o["CUDA_VISIBLE_DEVICES"] = virtual_device(w.local_rank, inherited);
  }
  for (const auto& [k, v] : w.extra_env) o[k] = v;  // the config said so: over an inherited value too
  return o;
}

std::vector<std::string> worker_environment(const WorkerIdentity& w) {
  auto env = current_environment();
  env.erase("MESHRUN_RDZV_TOKEN");  // the job's store secret stays with the launchers (rdzv_token.h)
  for (auto& [k, v] : worker_env_overrides(w, env)) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace meshtrain::launch
