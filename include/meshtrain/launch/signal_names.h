// Signal number ↔ name ("SIGTERM" ↔ 15), for --signals-to-handle, the root-cause summary and exit codes.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::launch {

// "SIGTERM" for 15; "SIG<n>" for a number without a name (real-time signals).
std::string signal_name(int signo);

// Accepts "SIGTERM", "TERM", "sigterm" or "15"; throws UserError naming the valid names.
int signal_from_name(const std::string& name);

// "SIGTERM,SIGINT" → {15, 2}; empty entries are skipped; SIGKILL/SIGSTOP/SIGCHLD are rejected.
std::vector<int> parse_signal_list(const std::string& list);

}  // namespace meshtrain::launch
