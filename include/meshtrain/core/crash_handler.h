// A fatal signal in a worker (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints one line naming it and the
// native stack to stderr before the process dies with that signal. meshrun's failure report quotes the last
// stderr lines of the rank that failed first, so a crash on a remote GPU arrives with its frames; frames in
// our binaries are printed as binary(+offset) — `addr2line -fCe BINARY OFFSET` names the function and line.
#pragma once

namespace meshtrain {

// Idempotent. `program` prefixes the line ("meshtrain", "comm_worker"); keep it a string literal.
void install_crash_handler(const char* program);

}  // namespace meshtrain
