#include "meshtrain/launch/signal_forwarder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

// Written by the handler: a plain int is enough (set before handlers are installed, read-only after).
volatile int g_write_fd = -1;

void on_signal(int signo) {
  int saved = errno;  // the handler must not clobber errno of the code it interrupted
  unsigned char b = static_cast<unsigned char>(signo);
  ssize_t ignored = ::write(g_write_fd, &b, 1);  // non-blocking: a full pipe drops the byte, never blocks
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe(const std::vector<int>& forwarded) {
  MT_CHECK(g_write_fd == -1, "only one SignalPipe per process");
  int p[2];
  SYS_CHECK(::pipe2(p, O_CLOEXEC | O_NONBLOCK), "signal pipe");
  read_fd_ = p[0];
  g_write_fd = p[1];
  installed_ = forwarded;
  installed_.push_back(SIGCHLD);
  previous_.resize(installed_.size());
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < installed_.size(); ++i)
    SYS_CHECK(::sigaction(installed_[i], &sa, &previous_[i]), "sigaction ", installed_[i]);
  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &previous_pipe_);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < installed_.size(); ++i) ::sigaction(installed_[i], &previous_[i], nullptr);
  ::sigaction(SIGPIPE, &previous_pipe_, nullptr);
  ::close(g_write_fd);
  ::close(read_fd_);
  g_write_fd = -1;
}

std::vector<int> SignalPipe::drain() {
  std::vector<int> out;
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(read_fd_, buf, sizeof(buf));
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) out.push_back(buf[i]);
      continue;
    }
    if (n == -1 && errno == EINTR) continue;
    break;
  }
  return out;
}

bool is_stop_signal(int signo) { return signo != SIGUSR1 && signo != SIGUSR2 && signo != SIGCHLD; }

}  // namespace meshtrain::launch
