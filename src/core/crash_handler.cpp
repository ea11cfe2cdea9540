#include "meshtrain/core/crash_handler.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <initializer_list>

namespace meshtrain {
namespace {

const char* g_program = "meshtrain";

void write_str(const char* s) {
  // write(2) only: the handler runs on a corrupted process, where stdio and malloc may be unusable.
  for (size_t n = strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_fatal_signal(int sig) {
  write_str(g_program);
  write_str(": fatal signal ");
  const char* name = sigabbrev_np(sig);
  write_str(name ? name : "?");
  write_str(" (");
  write_str(strsignal(sig));
  write_str("); native stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // Die of the same signal, so the parent (meshrun, a shell) sees what happened.
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_crash_handler(const char* program) {
  static bool installed = false;
  if (installed) return;
  installed = true;
  g_program = program;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler (dlopen is not signal-safe)
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace meshtrain
