// The job's rendezvous secret: every connection to the store must present it first (store_protocol.h's
// HELLO). Where it comes from, first match wins:
//   MESHRUN_RDZV_TOKEN=...             in the launcher's environment (same value on every node)
//   --rdzv-conf token_file=PATH        a file only the job's user can read (mode 0600 or stricter, owned by
//                                      the user; a looser one is refused). Node 0 creates it with a fresh
//                                      token when it does not exist (a shared file system hands it to the
//                                      others); the other nodes wait for it up to --rdzv-timeout.
//   neither, single node               node 0 makes a random one (getrandom) and keeps it to itself: its
//                                      workers reach the store through its relay, never with the token
// A job of several nodes without either is refused in one line. The token never reaches a worker's
// environment (worker_env.h removes MESHRUN_RDZV_TOKEN).
#pragma once

#include <chrono>
#include <string>

namespace meshtrain::launch {

constexpr const char* kRdzvTokenEnv = "MESHRUN_RDZV_TOKEN";

// 32 random bytes from getrandom(2), as 64 hex digits.
std::string make_rdzv_token();

// The token in `path`: UserError (one line, naming the file) when it is not a regular file of this user,
// is readable or writable by group or others, or is empty or over 1024 bytes (surrounding blanks dropped).
std::string read_rdzv_token_file(const std::string& path);

// The job's token as described above. `env_token`: MESHRUN_RDZV_TOKEN's value (empty when unset);
// `token_file`: --rdzv-conf token_file (empty when not given).
std::string resolve_rdzv_token(const std::string& env_token, const std::string& token_file, int node_rank,
                               int nnodes, std::chrono::milliseconds wait_for_file);

}  // namespace meshtrain::launch
