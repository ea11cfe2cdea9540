// `meshtrain bench train`: training throughput of one model shape on synthetic tokens, through the real
// training loop (train/trainer.h) — tokens/s, MFU and peak memory over the steps after warm-up. The driver
// scripts/bench/train_compare.py runs it beside the same model in PyTorch (eager and torch.compile).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

struct BenchTrainOptions {
  std::string preset = "gpt2-124m";  // model.preset
  int64_t seq_len = 1024;
  int64_t micro_batch = 32;
  int64_t layers = 0;   // > 0: override the preset's n_layer (e.g. Llama 3.1 8B's layer shape with 8 layers)
  int64_t steps = 20;   // timed steps
  int64_t warmup = 5;   // untimed steps before them
  bool activation_checkpointing = false;
  AttentionBackend attention = AttentionBackend::automatic;  // train.attention_backend: to compare them per shape
  // Non-empty: after the timed steps, `profile_steps` more are recorded by the profiler into this directory
  // (trace per rank + summary; train/step_profiler.h), so the timing is not disturbed by it.
  std::string profile_dir;
  int64_t profile_steps = 3;
  // Non-empty: the CUDA caching allocator's history over the whole run (set-up and every step) saved here for
  // PyTorch's memory viewer (train/memory_history.h); under meshrun each rank writes FILE.rankR. It slows the
  // steps (a C++ stack per allocation): measure speed without it.
  std::string memory_snapshot;
  std::vector<std::string> overrides;  // "section.key=value", applied last
};

struct BenchTrainResult {
  std::string name;  // "gpt2-124m b32 T1024"
  int64_t params = 0;
  double step_time_s = 0;  // median over the timed steps
  double tokens_per_s = 0;
  double mfu = 0;          // 0 when the device's peak is unknown
  int64_t peak_memory_bytes = 0;        // the whole run, set-up included (what a PyTorch script's peak counts)
  int64_t step_peak_memory_bytes = 0;   // the steps alone (GPU; what `meshtrain plan` predicts)
  int64_t setup_peak_memory_bytes = 0;  // building, placing and loading the model
  // Loss of the first and the last step: runs of one shape that differ only in kernels (train.fused_kernels)
  // see the same synthetic tokens and should agree within bf16 noise.
  double first_loss = 0, last_loss = 0;
};

// The run's config: the preset, synthetic data, no validation, no checkpoint, logging every step.
Config bench_train_config(const BenchTrainOptions& o);
BenchTrainResult run_bench_train(const BenchTrainOptions& o);

std::string bench_train_table(const BenchTrainResult& r);
std::string bench_train_json(const BenchTrainResult& r, const BenchTrainOptions& o);

}  // namespace meshtrain::train
