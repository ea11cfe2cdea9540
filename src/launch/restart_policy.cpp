// Which failures are restarted (see restart_policy.h).
#include "meshtrain/launch/restart_policy.h"

#include "meshtrain/core/error.h"

namespace meshtrain::launch {

std::string no_restart_line(int exit_code, const std::string& who, int restarts_left) {
  if (exit_code != kInvalidInputExitCode || restarts_left <= 0) return {};
  return cat("meshrun: no restart (", restarts_left, " left): the root cause exited with code ", kInvalidInputExitCode,
             ", invalid input (a bad config, flag or file) that a restart would only repeat: ", who);
}

}  // namespace meshtrain::launch
