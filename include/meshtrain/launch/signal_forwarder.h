// Signals to the launcher become bytes on a pipe (the self-pipe trick), so the supervisor's poll loop sees
// them in order, with all its state at hand, instead of acting inside a signal handler. SIGCHLD is routed
// the same way so a worker's exit wakes the loop at once. One instance per process; the destructor restores
// the previous handlers.
#pragma once

#include <csignal>
#include <vector>

namespace meshtrain::launch {

class SignalPipe {
 public:
  // Installs handlers for `forwarded` and SIGCHLD; ignores SIGPIPE (a closed console must not kill the
  // launcher while workers run).
  explicit SignalPipe(const std::vector<int>& forwarded);
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  ~SignalPipe();

  int fd() const { return read_fd_; }  // readable when a signal arrived
  std::vector<int> drain();             // signals received since the last call, in arrival order

 private:
  std::vector<int> installed_;
  std::vector<struct sigaction> previous_;
  struct sigaction previous_pipe_{};
  int read_fd_ = -1;
};

// Signals after which the launcher stops the workers (no restart): everything but SIGUSR1/SIGUSR2, which are
// notices (Slurm's preemption warning) that the workers handle while they keep running.
bool is_stop_signal(int signo);

}  // namespace meshtrain::launch
