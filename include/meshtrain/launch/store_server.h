// The rendezvous store's server: c10d::TCPStore's wire protocol (store_protocol.h), served by meshrun-store, a
// helper that node 0's launcher starts on the socket it bound (rendezvous_host.h). Our own server rather
// than c10d's, for two reasons: c10d's accepts anyone who can reach the port, and answers a malformed
// message with a LibTorch stack trace on the console. This one
//   - serves only connections that said HELLO with the job's token first (the launchers' StoreClient, and
//     each node's relay on behalf of its workers, store_relay.h), refusing any other in one line;
//   - lets each connection touch only the keys of its role (store_key_policy.h);
//   - parses every request with bounded lengths (store_request.h): a bad peer is one line on stderr
//     ("meshrun-store: closed <peer>: <what was wrong>") and its connection closed; everyone else is served;
//   - bounds what a peer can hold: a HELLO within `hello_timeout`, a started request completed within
//     `request_timeout`, at most `max_connections` at once, unread answers at most kStoreMaxRequestBytes.
// Single-threaded, poll()-driven, non-blocking sockets; no LibTorch.
#pragma once

#include <chrono>
#include <string>

namespace meshtrain::launch {

struct StoreServerOptions {
  int listen_fd = -1;  // already bound and listening
  std::string token;   // the job's secret (rdzv_token.h)
  int nnodes = 1;      // a HELLO names a node in [0, nnodes)
  std::chrono::milliseconds hello_timeout{10000};
  std::chrono::milliseconds request_timeout{30000};
  size_t max_connections = 4096;
};

// Serves until the process is signalled (the launcher kills it; PR_SET_PDEATHSIG when the launcher dies).
[[noreturn]] void serve_store(const StoreServerOptions& opts);

}  // namespace meshtrain::launch
