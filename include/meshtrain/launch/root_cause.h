// What the launcher says when a run fails: the first worker that failed (the root cause — the others were
// usually stopped by us, or failed because it did), how, when, its error file and its last stderr lines.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::launch {

struct WorkerFailure {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  pid_t pid = 0;
  int wait_status = 0;  // as from waitpid
  std::chrono::system_clock::time_point when;
  std::string error_file;                // TORCHELASTIC_ERROR_FILE path given to the worker
  std::vector<std::string> stderr_tail;  // last lines of its stderr
};

// The launcher's exit code for a worker's wait status: the exit code, or 128+N for signal N (the shell's
// convention).
int exit_code_of(int wait_status);
// "exit code 3" | "signal SIGSEGV (11)" (plus " (core dumped)").
std::string describe_status(int wait_status);
// torchrun's error file ({"message": {"message": ..., "extraInfo": {"py_callstack": ...}}}) or any text →
// readable lines; empty when the file does not exist.
std::string read_error_file(const std::string& path);
// Whether the worker says it failed because a peer vanished (broken pipe, connection reset or closed by
// the peer): then it is a consequence of another failure, not its cause.
bool failed_because_peer_vanished(const WorkerFailure& f);
// The "timestamp" of a torchrun error file (@record writes it), if any.
std::optional<long long> error_file_timestamp(const std::string& path);
// Of one attempt's failures, in the order they were reaped, the index of the root cause: a worker that did
// not fail because a peer vanished before one that did, then the first in time by the error files'
// timestamps, then the first reaped. `failures` must not be empty.
size_t pick_root_cause(const std::vector<WorkerFailure>& failures);
// The multi-line summary printed to stderr; `consequences` are listed after the root cause.
std::string format_root_cause(const WorkerFailure& f, int attempts, int world_size,
                              const std::vector<WorkerFailure>& consequences = {});

}  // namespace meshtrain::launch
