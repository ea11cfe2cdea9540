// ProgressMeter: progress and ETA for long byte-moving work (loading a checkpoint, importing weights), as
// one line every few seconds through log::progress (rank 0 only):
//   load: 41.2 / 141.1 GB (29%), 3.05 GB/s, 32s left
// Quick work prints nothing: the first line comes only once the work has run `after_s`, and a closing
// "done" line only when an earlier line was printed. Workers call add() from any thread; the owning thread
// calls report() whenever it wakes (ProgressMeter has no thread of its own) and finish() at the end.
//
// MESHTRAIN_PROGRESS_AFTER_S and MESHTRAIN_PROGRESS_EVERY_S override the defaults (3 s, 5 s): tests set them
// to 0 to see the lines on small inputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "meshtrain/core/clock.h"

namespace meshtrain {

class ProgressMeter {
 public:
  using Sink = std::function<void(const std::string& line)>;

  // `label` starts each line ("load", "import"); `sink` defaults to log::progress.
  ProgressMeter(std::string label, uint64_t total_bytes, Sink sink = {});

  void add(uint64_t bytes) { done_.fetch_add(bytes, std::memory_order_relaxed); }
  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  // Prints a line if the work has run `after_s` and the last line is `every_s` old.
  void report();
  // The closing line (bytes, mean rate, time taken), if any line was printed.
  void finish();
  // How long the owning thread may sleep before report() has something to say.
  double poll_s() const;

 private:
  std::string line(double elapsed, bool final) const;

  std::string label_;
  uint64_t total_;
  Sink sink_;
  double after_s_, every_s_;
  Clock::time_point start_ = Clock::now();
  double last_ = -1;  // elapsed seconds at the last line printed; < 0: none yet
  std::atomic<uint64_t> done_{0};
};

}  // namespace meshtrain
