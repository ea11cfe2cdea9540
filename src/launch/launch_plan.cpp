#include "meshtrain/launch/launch_plan.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>

#include "meshtrain/core/config.h"
#include "meshtrain/core/model_shape.h"
#include "meshtrain/core/nccl_env.h"
#include "meshtrain/core/run_dir.h"
#include "meshtrain/core/spawn_and_wait.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/signal_names.h"

namespace meshtrain::launch {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string random_run_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()));
  char buf[40];
  uint64_t a = g(), b = g();
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

std::string python_interpreter() {
  // $PYTHON wins; else the python3 on PATH (an activated venv's). torchrun uses its own sys.executable.
  if (const char* p = std::getenv("PYTHON"); p && *p) return p;
  return "python3";
}

// How the program runs (ProgramKind) and its argv, before the program's own arguments.
void set_program_command(LaunchPlan& p, const std::string& self_dir) {
  const LaunchOptions& o = p.opts;
  const std::string& prog = o.program;
  if (o.run_path) {  // torchrun: runpy.run_path of the script, whatever --no-python/--module say
    p.kind = ProgramKind::Python;
    MT_USER_CHECK(::access(prog.c_str(), R_OK) == 0, "meshrun: --run-path: script not found: ", prog);
    p.command = {python_interpreter(), "-u", prog};
  } else if (o.no_python) {
    p.kind = ProgramKind::Native;
    p.command = {prog};
  } else if (o.module) {
    p.kind = ProgramKind::Module;
    p.command = {python_interpreter(), "-u", "-m", prog};
  } else if (ends_with(prog, ".yaml") || ends_with(prog, ".yml") || ends_with(prog, ".json")) {
    p.kind = ProgramKind::Config;
    std::string meshtrain = self_dir + "/meshtrain";
    MT_USER_CHECK(::access(meshtrain.c_str(), X_OK) == 0, "meshrun: ", prog, " is a config, which runs `",
                  meshtrain, " train CONFIG`, but that binary is missing (build the `meshtrain` target)");
    MT_USER_CHECK(::access(prog.c_str(), R_OK) == 0, "meshrun: config file not found: ", prog);
    p.command = {meshtrain, "train", prog};
  } else {
    p.kind = ProgramKind::Python;
    MT_USER_CHECK(::access(prog.c_str(), R_OK) == 0, "meshrun: script not found: ", prog,
                  " (use --no-python to run a program on PATH)");
    p.command = {python_interpreter(), "-u", prog};
  }
}

}  // namespace

void check_gpu_per_worker(const LaunchPlan& p, const std::string& config_hint) {
  MT_USER_CHECK(p.gpu_count == 0 || p.nproc_per_node <= p.gpu_count, "meshrun: --nproc-per-node ",
                p.nproc_per_node, " starts more workers than the ", p.gpu_count,
                " GPU(s) visible on this node, and NCCL needs a GPU of its own per rank (two ranks on one GPU "
                "fail with \"Duplicate GPU detected\"); use at most ", p.gpu_count,
                ", or ask for the CPU backend (", config_hint, ")");
}

std::string gpu_sharing_note(const LaunchPlan& p) {
  if (p.gpu_count == 0 || p.nproc_per_node <= p.gpu_count) return "";
  return cat("meshrun: ", p.nproc_per_node, " workers share the ", p.gpu_count,
             " GPU(s) of this node round-robin (local rank r on GPU r mod ", p.gpu_count,
             "): fine for the CPU backend, which does not need a GPU of its own per rank");
}

std::string self_exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return p.parent_path().string();
}

bool is_loopback_address(const std::string& a) {
  return a == "localhost" || a == "::1" || a == "[::1]" || a.rfind("127.", 0) == 0;
}

LaunchPlan make_launch_plan(const LaunchOptions& o, const std::string& self_dir, int gpu_count, int cpu_count) {
  LaunchPlan p;
  p.opts = o;
  p.nproc_per_node = resolve_nproc_per_node(o.nproc_per_node, gpu_count, cpu_count);
  p.gpu_count = gpu_count;
  p.store_exe = self_dir + "/meshrun-store";
  const NodeCount nodes = parse_nnodes(o.nnodes);
  p.nnodes = nodes.max;
  p.min_nnodes = nodes.min;
  p.node_rank = o.node_rank;
  MT_USER_CHECK(p.node_rank >= 0 && p.node_rank < p.nnodes, "meshrun: node rank ", p.node_rank,
                " is outside [0, nnodes=", p.nnodes, ")");
  p.master_addr = o.master_addr;
  p.master_port = o.master_port;
  p.run_id = o.run_id;
  if (o.standalone) {
    // torchrun --standalone: local store on a free port and a fresh run id.
    p.master_addr = "127.0.0.1";
    p.master_port = 0;
    if (p.run_id == "none") p.run_id = random_run_id();
  }
  p.host_store = p.node_rank == 0;
  p.loopback_store = p.nnodes == 1 && is_loopback_address(p.master_addr);
  MT_USER_CHECK(p.nnodes == 1 || p.master_port != 0, "meshrun: --master-port 0 needs a single node; with ",
                p.nnodes, " nodes every launcher must know the port");
  p.forwarded_signals = parse_signal_list(o.signals_to_handle);

  check_local_ranks_filter(o.local_ranks_filter, p.nproc_per_node);
  set_program_command(p, self_dir);
  p.command.insert(p.command.end(), o.program_args.begin(), o.program_args.end());
  // A config says whether it trains on CPU; checked once it is loaded (validate_config_program). Scripts and
  // programs pick their backend themselves (gloo with 16 ranks on an 8-GPU node is legitimate), so for
  // them more workers than GPUs is only a warning (Supervisor::run).

  if (!o.log_dir.empty()) {
    std::string name = p.run_id;
    if (name == "none") {  // torchrun's default id would make every run overwrite the last one's logs
      char buf[32];
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
      name = "none_" + std::string(buf) + "_" + std::to_string(::getpid());
    }
    p.log_folder = o.log_dir + "/" + name;
  }
  return p;
}

namespace {

// A config whose model shape comes from checkpoint.init_from (ckpt/source_model.h) is checked by the worker
// binary, which can read a Hugging Face directory or a checkpoint (the launcher links no LibTorch): `meshtrain
// config CONFIG --check` runs the same rules with the source's shape; its one-line error is the user's.
void check_with_worker_binary(const LaunchPlan& plan, const std::vector<std::string>& sets, int world) {
  std::vector<std::string> argv = {plan.command[0], "config", plan.command[2], "--check", "--world-size",
                                   std::to_string(world)};
  for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
  const int rc = spawn_and_wait(argv);
  MT_USER_CHECK(rc == 0, "meshrun: ", plan.command[2], ": the config check above failed (`", plan.command[0],
                " config ", plan.command[2], " --check` exited ", rc, ")");
}

}  // namespace

void validate_config_program(LaunchPlan& plan) {
  if (plan.kind != ProgramKind::Config) return;
  // command = {meshtrain, "train", CONFIG, args...}; the trainer accepts `--set k=v`, `--set=k=v` and
  // `--overwrite`.
  std::vector<std::string> sets;
  for (size_t i = 3; i < plan.command.size(); ++i) {
    const std::string& a = plan.command[i];
    if (a == "--set" && i + 1 < plan.command.size()) sets.push_back(plan.command[++i]);
    else if (a.rfind("--set=", 0) == 0) sets.push_back(a.substr(6));
    else if (a == "--overwrite") sets.push_back("train.overwrite=true");  // the trainer's own flag for it
  }
  const int world = plan.nnodes * plan.nproc_per_node;
  Config cfg = load_config(plan.command[2], sets);
  if (!cfg.checkpoint.init_from.empty() && !gives_model_shape(cfg.model)) {
    check_with_worker_binary(plan, sets, world);
    resolve(cfg, world);
  } else {
    resolve(cfg, world);
    validate(cfg, world);
    check_inputs_exist(cfg);
  }
  check_fresh_start(cfg);
  plan.worker_env = parse_nccl_env(cfg.comm.nccl_env, cat(plan.command[2], ": comm.nccl_env"));
  // Only a run that resumes by itself can regroup in place: it starts again from the newest checkpoint.
  plan.in_place_restart = plan.opts.in_place_restart == "auto" && cfg.checkpoint.resume == "auto";
  if (!plan.worker_env.empty()) {
    std::string set;
    for (const auto& [k, v] : plan.worker_env) set += cat(set.empty() ? "" : " ", k, "=", v);
    log::info("meshrun: every worker gets %s (comm.nccl_env)", set.c_str());
  }
  if (cfg.train.device == TrainDevice::cpu || plan.opts.nproc_per_node == "cpu") return;  // no GPU used at all
  if (cfg.parallel.backend != CommBackend::cpu)
    check_gpu_per_worker(plan, cat("set parallel.backend: cpu or train.device: cpu in ", plan.command[2]));
  else if (std::string note = gpu_sharing_note(plan); !note.empty())
    log::info("%s", note.c_str());
}

}  // namespace meshtrain::launch
