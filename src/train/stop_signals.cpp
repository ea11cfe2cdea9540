#include "meshtrain/train/stop_signals.h"

#include <cstring>

namespace meshtrain::train {
namespace {

constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
volatile std::sig_atomic_t g_received = 0;

void on_signal(int sig) {
  if (g_received == 0) g_received = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking I/O resumes; the loop checks the flag between steps
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignals::pending() const { return g_received; }

int StopSignals::last_received() { return g_received; }

}  // namespace meshtrain::train
