// meshtrain doctor [CONFIG] [options]: the node's preflight table (train/doctor.h); exit 1 when a check fails.
#include "cli.h"
#include "commands.h"
#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/doctor.h"

namespace meshtrain::cli {

int cmd_doctor(int argc, char** argv) {
  cxxopts::Options o("meshtrain doctor",
                     "Preflight of this node before a long run: GPU count and model, ECC / retired pages, NVLinks "
                     "up, PCIe link width, clocks not capped, temperature, an all-reduce over the node's GPUs "
                     "against the rate its topology should reach, and the checkpoint directory's write rate and "
                     "free space against the checkpoint size. Prints one table; exit code 1 and the failing line "
                     "when something is wrong (a Slurm prolog can drain the node), 2 for a bad flag or config.");
  o.add_options()("gpus", "GPUs the run needs on this node (default: whatever is there, at least 1)",
                  cxxopts::value<int>())("gpu-model", "a part of every GPU's name, e.g. H100 (default: all alike)",
                                         cxxopts::value<std::string>())(
      "nvlinks", "active NVLinks each GPU must have (default: the same on every GPU)", cxxopts::value<int>())(
      "checkpoint-dir", "directory to probe (default: the config's checkpoint.dir)", cxxopts::value<std::string>())(
      "checkpoint-gb", "checkpoint size in GB (default: 12 bytes per parameter of the config's model)",
      cxxopts::value<double>())("max-write-s", "a checkpoint must write within this many seconds",
                                cxxopts::value<double>()->default_value("300"))(
      "no-allreduce", "skip the all-reduce")("allreduce-bytes", "all-reduce size (K/M/G suffixes)",
                                             cxxopts::value<std::string>()->default_value("1G"))(
      "readings", "GPU readings from a JSON file (written by --save) instead of this node's NVML",
      cxxopts::value<std::string>())("save", "write this node's GPU readings to FILE", cxxopts::value<std::string>())(
      "set", "override a config key: section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>())(
      "h,help", "show this help")("config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("[CONFIG]");
  auto r = parse(o, argc, argv);
  const auto configs = strings(r, "config");
  MT_USER_CHECK(configs.size() <= 1, "meshtrain doctor: at most one CONFIG file, got ", configs.size());
  train::DoctorOptions d;
  if (!configs.empty()) d.config = configs[0];
  d.overrides = strings(r, "set");
  if (r.count("gpus")) d.gpus = r["gpus"].as<int>();
  MT_USER_CHECK(d.gpus == -1 || d.gpus >= 1, "meshtrain doctor: --gpus must be ≥ 1, given ", d.gpus);
  if (r.count("gpu-model")) d.gpu_model = r["gpu-model"].as<std::string>();
  if (r.count("nvlinks")) d.nvlinks = r["nvlinks"].as<int>();
  if (r.count("checkpoint-dir")) d.checkpoint_dir = r["checkpoint-dir"].as<std::string>();
  if (r.count("checkpoint-gb")) d.checkpoint_gb = r["checkpoint-gb"].as<double>();
  d.max_write_s = r["max-write-s"].as<double>();
  d.allreduce = !r.count("no-allreduce");
  d.allreduce_bytes = static_cast<int64_t>(parse_bytes("--allreduce-bytes", r["allreduce-bytes"].as<std::string>()));
  if (r.count("readings")) d.readings = r["readings"].as<std::string>();
  if (r.count("save")) d.save = r["save"].as<std::string>();
  return train::run_doctor(d);
}

}  // namespace meshtrain::cli
