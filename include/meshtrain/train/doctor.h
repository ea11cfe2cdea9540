// meshtrain doctor: is this node healthy before a long run? One table (hw/node_checks.h): GPU count and model
// as expected, ECC / retired pages, NVLinks up, PCIe link width, clocks not capped, temperature, an all-reduce
// over the node's GPUs at a size that reaches bus bandwidth against the rate the topology should give, and
// the checkpoint directory's write rate and free space against the checkpoint size. Exit code 1 and the
// failing line when something is wrong, so a Slurm prolog (or `meshrun --preflight`) can drain the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

struct DoctorOptions {
  std::string config;         // a run's config: checkpoint.dir and the checkpoint's size come from it
  std::vector<std::string> overrides;  // --set section.key=value on top of it
  int gpus = -1;              // GPUs the run needs on this node; -1: whatever is there (≥ 1)
  std::string gpu_model;      // a substring every GPU's name must hold ("H100"); empty: all alike
  int nvlinks = -1;           // active NVLinks per GPU; -1: the same on every GPU
  std::string readings;       // GPU readings from a file (gpu_sensors_json.h) instead of NVML
  std::string save;           // write this node's readings there (a fixture for later)
  std::string checkpoint_dir; // overrides the config's checkpoint.dir
  double checkpoint_gb = -1;  // overrides the size derived from the config
  double max_write_s = 300;   // a checkpoint must write in this long
  bool allreduce = true;      // run the all-reduce (needs ≥ 2 GPUs and NCCL)
  int64_t allreduce_bytes = int64_t{1} << 30;  // large enough for bus bandwidth on NVLink
};

// Prints the table to stdout; 0 when every check passes, 1 when one fails.
int run_doctor(const DoctorOptions& o);

// The bytes a checkpoint of this config takes: fp32 weights and AdamW's two moments, 12 bytes per parameter.
int64_t checkpoint_bytes(const Config& cfg);

}  // namespace meshtrain::train
