// Which failures --max-restarts restarts: the rule one node (Supervisor::decide) and several nodes
// (decide_with_nodes, on the cause every launcher read from the store) share.
//
// A restart runs the same program on the same input (a meshtrain worker resumes from the same checkpoint and
// replays the same steps bit for bit), so it helps only a failure that may not happen again. Exit code 2
// says it will: it is the code for invalid input. meshtrain exits 2 only for a UserError — a bad config,
// flag or file, found before the first step; the few raised later (train.max_nonfinite_steps non-finite
// steps in a row, a non-finite state before a save) come back identically on a bit-exact resume — and
// Python's argparse exits 2 on a usage error. So a root cause that exited 2 is not restarted.
//
// The root cause alone decides, not "every worker exited 2": meshrun stops the other workers as soon as the
// first one fails, so whether they reached their own exit 2 before our SIGTERM is a race; the root cause
// (the first failure in time, root_cause.h) is the same whatever the timing.
#pragma once

#include <string>

namespace meshtrain::launch {

// The exit code of invalid input: a failure that a restart would repeat.
constexpr int kInvalidInputExitCode = 2;

// One line saying why a root cause that exited with `exit_code` is not restarted although `restarts_left`
// remain; empty when a restart may help. `who` names it: "rank 1 (pid 42)", or the multi-node cause's text.
std::string no_restart_line(int exit_code, const std::string& who, int restarts_left);

}  // namespace meshtrain::launch
