// One worker: a child process in its own process group, with its stdout/stderr on pipes the launcher reads.
// RAII: the destructor SIGKILLs the worker's whole group and reaps it, so no code path (exception, early
// return) can leave a worker running. Non-copyable, movable.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace meshtrain::launch {

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is resolved on PATH before the fork
  std::vector<std::string> env;   // "NAME=value", the complete environment
  std::vector<int> cpus;          // CPU affinity; empty = inherit the launcher's
  bool capture_output = true;     // stdout/stderr on pipes for the log router; false = the launcher's own
  std::vector<int> pass_fds;      // fds the child keeps across exec (CLOEXEC cleared in the child only)
};

// PATH lookup done in the parent, so "program not found" is one clear line before anything starts.
// Returns the path to execute; throws UserError when there is none.
std::string resolve_executable(const std::string& program);

class WorkerProcess {
 public:
  // fork + exec. The child: setpgid(0,0) (own group, so a signal to the group reaches the worker's own
  // children too), PR_SET_PDEATHSIG(SIGKILL) then a getppid() check (the launcher may have died between
  // fork and prctl), default signal dispositions and an empty signal mask (the launcher's are not the
  // worker's business). Throws UserError if exec fails (the child reports errno through a CLOEXEC pipe).
  static WorkerProcess spawn(const SpawnSpec& spec);

  WorkerProcess() = default;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  WorkerProcess(WorkerProcess&& o) noexcept;
  WorkerProcess& operator=(WorkerProcess&& o) noexcept;
  ~WorkerProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // Wait status (as from waitpid) once reaped.
  std::optional<int> status() const { return status_; }

  // Parent ends of the pipes (non-blocking, CLOEXEC); -1 once taken or closed.
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  // Hands the pipe fds to the caller (the log router), who closes them.
  int release_stdout();
  int release_stderr();

  // kill(-pgid, sig): the worker and everything it started in its group. ESRCH is not an error.
  void signal_group(int sig) const;
  // waitpid(WNOHANG); true when the worker has just been reaped.
  bool try_reap();

 private:
  void destroy() noexcept;
  pid_t pid_ = -1;  // also the process group id
  std::optional<int> status_;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

}  // namespace meshtrain::launch
