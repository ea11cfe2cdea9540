// spawn_and_wait: runs a helper program to its end in a child process — the one way meshtrain runs a command
// of its own and waits for its verdict (meshrun --preflight runs `meshtrain doctor`; `meshtrain doctor` runs
// an all-reduce job under meshrun). The child inherits this process's environment, stdout and stderr.
// Supervising long-lived workers (process groups, signals, log routing) is launch/worker_process.h's job.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain {

// The program could not be started (argv[0] missing or not executable): the caller decides whether that is
// the user's mistake or a broken installation.
class SpawnError : public Error {
 public:
  explicit SpawnError(const std::string& what) : Error(what) {}
};

// Runs argv (argv[0] a path: no PATH search) and waits for it. Returns its exit code, or 128 + the signal
// that ended it (the shell's convention: 137 for SIGKILL). Throws SpawnError "cannot start PROGRAM: why".
int spawn_and_wait(const std::vector<std::string>& argv);

}  // namespace meshtrain
