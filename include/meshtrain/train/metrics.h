// Step metrics: a JSONL file (one object per line, rank 0 only, flushed every line so a crash loses at most
// the line being written), the same numbers as TensorBoard scalars when logging.tensorboard names a directory
// (train/tensorboard_writer.h) and in Weights & Biases when logging.wandb is on (train/wandb_writer.h), and
// the numbers behind the console progress line. Both trackers get the resolved config at the start: TensorBoard
// as hyperparameters (HParams tab) and as text, W&B as the run's config.
//
// MFU = tokens/s × 3 × forward FLOPs per token ÷ (GPUs × the GPU's dense bf16 peak); the formula and the
// peaks are in docs/metrics.md. On CPU there is no meaningful peak and MFU is omitted.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/train/tensorboard_writer.h"
#include "meshtrain/train/wandb_writer.h"

namespace meshtrain::train {

class MetricsLog {
 public:
  // Rank ≠ 0: a no-op sink. Rank 0 writes cfg.logging.metrics (none when empty), appending to an existing file
  // when `append` (resumed runs), and starts the trackers cfg.logging names (tensorboard: a new event file;
  // wandb: the bridge, a UserError when it cannot start).
  MetricsLog(const Config& cfg, int rank, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // `texts` (tag, text) go to TensorBoard's text tab at the record's step (the record holds them for the JSONL).
  void write(const nlohmann::json& record, const std::vector<std::pair<std::string, std::string>>& texts = {});
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<WandbWriter> wandb_;
};

// Dense bf16 peak FLOP/s of the current CUDA device by name (A100, H100, H200, ...), 0 when unknown or CPU.
double device_peak_flops(bool cuda, int device_index);
// Peak memory in bytes: the CUDA caching allocator's peak on GPU, the process's max RSS on CPU.
int64_t peak_memory_bytes(bool cuda, int device_index);
// Starts the peak over on GPU (the next peak_memory_bytes() is the peak since this call); a no-op on CPU, where
// the max RSS cannot be reset.
void reset_peak_memory(bool cuda, int device_index);
// Total memory of the device: the GPU's on CUDA, the machine's physical memory on CPU.
int64_t device_memory_bytes(bool cuda, int device_index);

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace meshtrain::train
