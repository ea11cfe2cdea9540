// fork/exec of one worker. posix_spawn would be simpler but cannot set PR_SET_PDEATHSIG, which is what makes
// workers die with a SIGKILLed launcher. Between fork and exec the child only makes async-signal-safe
// calls: the launcher is multi-threaded (the TCPStore server runs its own thread), so a lock held by another
// thread at fork time stays held forever in the child. Everything the child needs is prepared before fork.
#include "meshtrain/launch/worker_process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {

std::string resolve_executable(const std::string& program) {
  MT_USER_CHECK(!program.empty(), "meshrun: empty program name");
  auto executable = [](const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    MT_USER_CHECK(::access(program.c_str(), F_OK) == 0, "meshrun: program not found: ", program);
    MT_USER_CHECK(executable(program), "meshrun: program is not executable: ", program,
                  " (chmod +x it, or drop --no-python to run it under python)");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(cand)) return cand;
    start = end + 1;
  }
  throw UserError(cat("meshrun: program not found on PATH: ", program));
}

WorkerProcess WorkerProcess::spawn(const SpawnSpec& spec) {
  MT_CHECK(!spec.argv.empty(), "spawn: empty argv");
  std::string exe = resolve_executable(spec.argv[0]);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) CPU_SET(c, &cpus);
  const bool pin = !spec.cpus.empty();

  const bool capture = spec.capture_output;
  const std::vector<int>& keep = spec.pass_fds;
  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_err[2];
  if (capture) {
    SYS_CHECK(::pipe2(out, O_CLOEXEC), "stdout pipe");
    SYS_CHECK(::pipe2(err, O_CLOEXEC), "stderr pipe");
  }
  SYS_CHECK(::pipe2(exec_err, O_CLOEXEC), "exec status pipe");
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid == -1) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], exec_err[0], exec_err[1]})
      if (fd >= 0) ::close(fd);
    throw Error(cat("fork: ", std::strerror(e)));
  }
  if (pid == 0) {
    // Child. Async-signal-safe calls only (see the file comment).
    ::setpgid(0, 0);
    // Dies with the launcher, even on SIGKILL. PDEATHSIG fires when the *thread* that forked exits: the
    // launcher forks from its main thread, which lives as long as the launcher.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
    if (capture) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
    }
    for (int fd : keep) ::fcntl(fd, F_SETFD, 0);  // survives exec in this child only
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (pin) ::sched_setaffinity(0, sizeof(cpus), &cpus);
    ::execve(exe.c_str(), argv.data(), envp.data());
    int e = errno;
    ssize_t ignored = ::write(exec_err[1], &e, sizeof(e));
    (void)ignored;
    ::_exit(127);
  }
  // Parent. setpgid here too: whichever of parent and child runs first, the group exists before we signal it.
  ::setpgid(pid, pid);
  if (capture) {
    ::close(out[1]);
    ::close(err[1]);
  }
  ::close(exec_err[1]);
  WorkerProcess w;
  w.pid_ = pid;
  w.out_fd_ = out[0];
  w.err_fd_ = err[0];
  for (int fd : {w.out_fd_, w.err_fd_})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  // EOF on the CLOEXEC pipe = exec succeeded; 4 bytes = the child's errno from execve.
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_err[0], &child_errno, sizeof(child_errno));
  } while (n == -1 && errno == EINTR);
  ::close(exec_err[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    throw UserError(cat("meshrun: cannot execute ", exe, ": ", std::strerror(child_errno)));
    // w's destructor reaps the child.
  }
  return w;
}

WorkerProcess::WorkerProcess(WorkerProcess&& o) noexcept
    : pid_(o.pid_), status_(o.status_), out_fd_(o.out_fd_), err_fd_(o.err_fd_) {
  o.pid_ = -1;
  o.out_fd_ = o.err_fd_ = -1;
}

WorkerProcess& WorkerProcess::operator=(WorkerProcess&& o) noexcept {
  if (this != &o) {
    destroy();
    pid_ = o.pid_;
    status_ = o.status_;
    out_fd_ = o.out_fd_;
    err_fd_ = o.err_fd_;
    o.pid_ = -1;
    o.out_fd_ = o.err_fd_ = -1;
  }
  return *this;
}

WorkerProcess::~WorkerProcess() { destroy(); }

void WorkerProcess::destroy() noexcept {
  if (pid_ > 0) {
    // Group first (the worker's own children), then reap the leader so it leaves no zombie.
    ::kill(-pid_, SIGKILL);
    if (!status_) {
      int st = 0;
      while (::waitpid(pid_, &st, 0) == -1 && errno == EINTR) {
      }
    }
    pid_ = -1;
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
  out_fd_ = err_fd_ = -1;
}

int WorkerProcess::release_stdout() {
  int fd = out_fd_;
  out_fd_ = -1;
  return fd;
}

int WorkerProcess::release_stderr() {
  int fd = err_fd_;
  err_fd_ = -1;
  return fd;
}

void WorkerProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

bool WorkerProcess::try_reap() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, WNOHANG);
  } while (r == -1 && errno == EINTR);
  if (r == pid_) {
    status_ = st;
    return true;
  }
  return false;
}

}  // namespace meshtrain::launch
