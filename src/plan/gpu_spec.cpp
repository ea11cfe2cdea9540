// The GPU table (gpu_spec.h). Memory sizes are the devices' reported totals (nvidia-smi's MiB × 2^20); peaks are
// NVIDIA's dense bf16 data-sheet figures for the SXM parts (the same ones train/metrics.cpp divides by for MFU).
#include "meshtrain/plan/gpu_spec.h"

#include "meshtrain/core/error.h"

namespace meshtrain::plan {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr double kGB = 1e9;

const std::vector<GpuSpec>& table() {
  static const std::vector<GpuSpec> t = {
      // A 24 GB PCIe card (no NVLink: collectives at the PCIe rate), for single-GPU fine-tuning plans (QLoRA).
      {"l4-24gb", 23034 * kMiB, 121e12, 22 * kGB, 22 * kGB, 12 * kGB, 500 * kMiB, 300 * kGB},
      {"a100-40gb", 40960 * kMiB, 312e12, 230 * kGB, 22 * kGB, 45 * kGB, 600 * kMiB, 1555 * kGB},
      {"a100-80gb", 81920 * kMiB, 312e12, 230 * kGB, 22 * kGB, 45 * kGB, 600 * kMiB, 2039 * kGB},
      {"h100-80gb", 81559 * kMiB, 989e12, 360 * kGB, 45 * kGB, 45 * kGB, 600 * kMiB, 3350 * kGB},
      {"h200-141gb", 143771 * kMiB, 989e12, 360 * kGB, 45 * kGB, 45 * kGB, 600 * kMiB, 4800 * kGB},
  };
  return t;
}

}  // namespace

std::vector<std::string> gpu_names() {
  std::vector<std::string> out;
  for (const auto& g : table()) out.push_back(g.name);
  return out;
}

GpuSpec gpu_spec(const std::string& name, const std::string& flag) {
  std::string valid;
  for (const auto& g : table()) {
    if (g.name == name) return g;
    valid += (valid.empty() ? "" : " | ") + g.name;
  }
  throw UserError(cat(flag, ": given '", name, "'; valid: ", valid));
}

}  // namespace meshtrain::plan
