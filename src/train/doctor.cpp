#include "meshtrain/train/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshtrain/ckpt/source_model.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/core/model_size.h"
#include "meshtrain/core/spawn_and_wait.h"
#include "meshtrain/hw/gpu_sensors_json.h"
#include "meshtrain/hw/node_checks.h"
#include "meshtrain/hw/topology_detect.h"

namespace meshtrain::train {
namespace {

std::string self_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// The node's GPUs in one all-reduce, run as a real job: meshrun starts `meshtrain bench comm` on each GPU
// (NCCL), rank 0 writes the rate to a file read back here.
hw::CheckRow allreduce_row(int gpus, const std::string& gpu_name, int64_t bytes) {
  const hw::BusBandwidth want = hw::expected_allreduce_busbw(hw::detect_topology(), gpus, gpu_name);
  const std::string json = cat(std::filesystem::temp_directory_path().string(), "/meshtrain_doctor_allreduce.", ::getpid(), ".json");
  const std::string dir = self_dir(), size = cat(bytes);
  const int rc = spawn_and_wait({dir + "/meshrun", "--standalone", "--nproc-per-node", cat(gpus), "--no-python",
                                 dir + "/meshtrain", "bench", "comm", "--backend", "nccl", "--ops", "all_reduce",
                                 "--min-bytes", size, "--max-bytes", size, "--min-seconds", "1", "--json", json});
  std::ifstream in(json);
  if (rc != 0 || !in) {
    std::filesystem::remove(json);
    return {"all-reduce bus bandwidth", cat("the all-reduce job failed (exit ", rc, ")"), "it runs", hw::CheckStatus::Fail};
  }
  const auto j = nlohmann::json::parse(in);
  std::filesystem::remove(json);
  return hw::check_allreduce_busbw(j.at("results").at(0).at("busbw_gbs").get<double>(), want);
}

}  // namespace

int64_t checkpoint_bytes(const Config& cfg) { return static_cast<int64_t>(model_size(cfg.model).params * 12); }

int run_doctor(const DoctorOptions& o) {
  const auto sensors = o.readings.empty() ? hw::nvml_sensors() : hw::load_gpu_sensors(o.readings);
  if (!o.save.empty()) {
    std::ofstream(o.save) << hw::gpu_sensors_to_json(*sensors);
    std::printf("wrote this node's GPU readings to %s\n", o.save.c_str());
  }
  std::vector<hw::CheckRow> rows = hw::check_gpus(*sensors, {.gpus = o.gpus, .gpu_model = o.gpu_model, .nvlinks = o.nvlinks});
  const int n = o.gpus > 0 ? std::min(o.gpus, sensors->count()) : sensors->count();
  if (!o.allreduce || !o.readings.empty())
    rows.push_back({"all-reduce bus bandwidth", o.readings.empty() ? "not asked for" : "readings from a file", "-",
                    hw::CheckStatus::Skip});
  else if (n < 2)
    rows.push_back({"all-reduce bus bandwidth", cat(n, " GPU(s)"), "≥ 2 GPUs", hw::CheckStatus::Skip});
  else
    rows.push_back(allreduce_row(n, sensors->health(0).name, o.allreduce_bytes));

  std::string dir = o.checkpoint_dir;
  int64_t bytes = o.checkpoint_gb >= 0 ? static_cast<int64_t>(o.checkpoint_gb * 1e9) : 0;
  if (!o.config.empty()) {
    Config cfg = load_config(o.config, o.overrides);
    ckpt::adopt_source_model(cfg);  // the checkpoint size of a model that init_from names
    resolve(cfg, std::max(1, o.gpus));
    if (dir.empty()) dir = cfg.checkpoint.dir;
    if (o.checkpoint_gb < 0) bytes = checkpoint_bytes(cfg);
  }
  if (dir.empty())
    rows.push_back({"checkpoint dir", "no config or --checkpoint-dir", "-", hw::CheckStatus::Skip});
  else
    rows.push_back(hw::check_checkpoint_dir(dir, bytes, o.max_write_s));
  std::printf("meshtrain doctor: %d GPU(s) [%s]\n%s", sensors->count(), sensors->source().c_str(),
              hw::format_check_table(rows).c_str());
  std::fflush(stdout);
  return hw::all_passed(rows) ? 0 : 1;
}

}  // namespace meshtrain::train
