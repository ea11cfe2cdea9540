// Signal name table. strsignal() gives prose ("Terminated"), sigabbrev_np() needs glibc 2.32: a small table
// of the signals a launcher meets is clearer and portable.
#include "meshtrain/launch/signal_names.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

struct Entry {
  int signo;
  const char* name;
};

constexpr Entry kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},     {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},   {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},   {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},   {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},   {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},     {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGSYS, "SIGSYS"},
};

}  // namespace

std::string signal_name(int signo) {
  for (const Entry& e : kSignals)
    if (e.signo == signo) return e.name;
  return "SIG" + std::to_string(signo);
}

int signal_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  if (!n.empty() && std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c); })) {
    int s = std::stoi(n);
    MT_USER_CHECK(s > 0 && s < NSIG, "meshrun: signal number ", s, " is out of range 1..", NSIG - 1);
    return s;
  }
  if (n.rfind("SIG", 0) != 0) n = "SIG" + n;
  for (const Entry& e : kSignals)
    if (n == e.name) return e.signo;
  std::string valid;
  for (const Entry& e : kSignals) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  throw UserError(cat("meshrun: unknown signal '", name, "'; valid: ", valid));
}

std::vector<int> parse_signal_list(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }),
               item.end());
    if (item.empty()) continue;
    int s = signal_from_name(item);
    MT_USER_CHECK(s != SIGKILL && s != SIGSTOP && s != SIGCHLD, "meshrun: --signals-to-handle: ",
                  signal_name(s), " cannot be handled or forwarded");
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

}  // namespace meshtrain::launch
