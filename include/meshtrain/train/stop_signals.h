// StopSignals: SIGTERM, SIGINT and SIGUSR1 (Slurm's preemption warning, forwarded by meshrun) ask the trainer
// to stop at the next step boundary: every rank agrees on it (one tiny all-reduce per step), saves a
// checkpoint, and exits with 128 + the signal. With `checkpoint.resume: auto` the next run (or meshrun's
// restart) continues from that step. The handler only records the signal; everything else happens in the
// training loop, outside signal context.
#pragma once

#include <csignal>

namespace meshtrain::train {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0, or the number of the first stop signal received.
  int pending() const;
  // The same, still readable after the StopSignals is gone (until the next one is made): a run torn down by an
  // error may have had a stop signal that it never acted on.
  static int last_received();

 private:
  struct sigaction previous_[3];
};

}  // namespace meshtrain::train
