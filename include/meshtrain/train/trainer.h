// Trainer: the worker's training loop (`meshtrain train CONFIG`).
//
//   setup:  world from the launcher's env → store → communicator → model (seeded init, identical on every
//           rank, then broadcast from rank 0) → AdamW → data loaders → resume from a checkpoint if asked
//   step:   grad_accum × (batch → forward → loss / grad_accum → backward) → average gradients over ranks →
//           clip global norm → AdamW at the scheduled lr (skipped on every rank when the loss or gradient
//           norm is inf/nan; train.max_nonfinite_steps in a row stop the run) → metrics (JSONL; console line
//           with ETA on rank 0)
//   every N: validation loss, checkpoint;  at the end: validation, checkpoint, a text sample, and a
//           checksum of the parameters on every rank (replicas must agree bit for bit).
//   signals: SIGTERM / SIGINT / SIGUSR1 → checkpoint at the next step boundary and stop (stop_signals.h).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

struct TrainResult {
  int64_t steps_done = 0;
  double first_loss = 0, last_loss = 0, last_val_loss = -1;
  uint32_t param_checksum = 0;
  int stop_signal = 0;  // SIGTERM/SIGINT/SIGUSR1 stopped the run early (after saving a checkpoint)

  // What throughput benchmarks read (train/bench_train.h).
  std::vector<double> step_seconds;  // wall time of every step this run made, device synchronised
  int64_t tokens_per_step = 0;       // all ranks
  double flops_per_token = 0;        // forward + backward (docs/metrics.md)
  double peak_flops = 0;             // per device; 0 when unknown (CPU)
  int64_t peak_memory_bytes = 0;     // this rank's device over the whole run (CPU: max RSS)
  // GPU: the peak of building, placing and loading the model before the first step, and the peak of the steps
  // alone (what `meshtrain plan` predicts); peak_memory_bytes is the larger. CPU: both equal the max RSS.
  int64_t setup_peak_memory_bytes = 0;
  int64_t step_peak_memory_bytes = 0;
  int64_t num_params = 0;
};

// `cfg` must be resolved and validated for the current world size. Under meshrun's in-place restart a failed run
// starts again in this process once every rank has regrouped (train/in_place_restart.h).
TrainResult run_training(const Config& cfg);

}  // namespace meshtrain::train
