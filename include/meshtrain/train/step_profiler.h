// StepProfiler: records steps [first, first + count) of a training run with LibTorch's Kineto profiler (CPU
// ops, and CUDA kernels/copies where the run is on a GPU) and, after the last of them, writes
//   DIR/rank_R.trace.json    Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev)
//   DIR/rank_R.summary.json  the top kernels by time, grouped by step phase (train/profile_summary.h)
// and returns the summary for the log. Files are written under a temporary name and renamed.
//
// The trainer marks each step and its optimizer part with a StepScope so the summary can group events.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <optional>
#include <string>

#include "meshtrain/train/profile_summary.h"

namespace meshtrain::train {

class StepProfiler {
 public:
  // count 0: never records (every call is a no-op).
  StepProfiler(int64_t first_step, int64_t count, std::string dir, int rank, bool cuda, int device_index);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Call before step `step` runs: starts recording at the first profiled step.
  void before_step(int64_t step);
  // Call after step `step` finished: after the last profiled step, stops, writes the files and returns the
  // summary (once); otherwise nothing.
  std::optional<ProfileSummary> after_step(int64_t step);
  // Whether `step` is the last one recorded: the trainer finishes it before queuing the next, so that no later
  // kernel enters the trace.
  bool ends_at(int64_t step) const { return count_ > 0 && step == first_ + count_ - 1; }
  const std::string& dir() const { return dir_; }

 private:
  int64_t first_, count_;
  std::string dir_;
  int rank_;
  bool cuda_;
  int device_index_;
  bool recording_ = false;
};

// Marks a span of the step in the profile ("meshtrain::step", "meshtrain::optimizer", "meshtrain::comm");
// costs a flag check when no profiler is recording.
class StepScope {
 public:
  explicit StepScope(const char* name);

 private:
  at::RecordFunction fn_;
};

}  // namespace meshtrain::train
