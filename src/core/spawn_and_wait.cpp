// spawn_and_wait: posix_spawn + waitpid; see spawn_and_wait.h.
#include "meshtrain/core/spawn_and_wait.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace meshtrain {

int spawn_and_wait(const std::vector<std::string>& args) {
  MT_CHECK(!args.empty(), "spawn_and_wait: no program given");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  // glibc's posix_spawn reports a failed exec (missing file, not executable) here, not as a child exit code.
  const int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw SpawnError(cat("cannot start ", args[0], ": ", std::strerror(rc)));
  int status = 0;
  // A signal handled by this process (meshrun forwards SIGINT/SIGTERM) interrupts the wait, not the child.
  while (::waitpid(pid, &status, 0) == -1) {
    if (errno != EINTR) SYS_CHECK(-1, "waitpid ", args[0]);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace meshtrain
