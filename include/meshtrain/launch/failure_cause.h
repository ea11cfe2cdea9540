// The failure cause the launchers of a multi-node job share through the store (node_coordinator.h, key
// meshrun/cause/<r>: "<exit code>\t<stop 0|1>\t<description>"), read back defensively, and the exit code a
// failed job ends with.
//
// Anyone who can reach the store can write that key, so nothing in the record is trusted: a malformed one
// (no tabs, a code that is not a number, a stop flag other than 0/1) is described in one line naming the
// key, and no record can make a failed job exit 0. The exit code follows torchrun's rule: a failed job exits
// non-zero; where this node's workers failed, with the root-cause worker's code (128+N for signal N); a
// remote cause's code only when it is a failure's exit code (1..255); else 1.
#pragma once

#include <optional>
#include <string>

namespace meshtrain::launch {

struct FailureCause {
  int exit_code = 1;    // the reporter's exit code for the failure, 1..255 (1 when the record's is not valid)
  bool stop = false;    // a stop signal or an invalid record: nobody restarts
  std::string text;     // "rank 3 on node 1 (host h, pid p): exit code 5", one line
  std::string problem;  // empty, or one line saying what is wrong with the record (naming the key)
};

// The record report() writes: "<exit code>\t<stop 0|1>\t<description>".
std::string format_failure_cause(int exit_code, bool stop, const std::string& text);
// Reads a record written by format_failure_cause() — or by anyone else — under `key`. Never throws. A
// record that is malformed, or whose code is not a failure's (0, negative, over 255), gets `problem`, exit
// code 1 and stop: the launchers cannot tell what failed, so none restarts on its word.
FailureCause parse_failure_cause(const std::string& key, const std::string& record);

// Whether a failed job exits with this code: a process exit code that says failure.
inline bool is_failure_exit_code(long long code) { return code >= 1 && code <= 255; }

struct JobExit {
  int code = 1;      // never 0
  std::string line;  // "meshrun: job FAILED after 2 attempt(s): <cause>; exiting with 5", one line
};
// How a multi-node job that failed (or was stopped) after `attempts` attempts ends on this node: `local` is
// this node's root-cause worker's exit code, or 128+N for a stop signal this launcher got, when there is one.
JobExit failed_job_exit(const FailureCause& cause, std::optional<int> local, int attempts);

}  // namespace meshtrain::launch
