// The per-node relay between a node's workers and the rendezvous store. Workers are stock TCPStore clients
// (PyTorch's env:// init, meshtrain's comm/store.h) that cannot present the job's token, so they do not
// reach the store directly: each node's launcher runs this relay on loopback (MASTER_ADDR=127.0.0.1,
// MASTER_PORT=its port in the workers' environment), and the relay opens one connection to the store per
// worker connection, says HELLO for "the workers of node N" with the token (store_protocol.h), waits for the
// store's acceptance, and from then on forwards bytes both ways unchanged.
//
// Only the job's user reaches it: a connection whose socket belongs to another uid (the uid column of
// /proc/net/tcp{,6}) is refused in one line. Runs in meshrun-store, like the server (rendezvous_host.h).
#pragma once

#include <chrono>
#include <string>

namespace meshtrain::launch {

struct StoreRelayOptions {
  int listen_fd = -1;         // bound to loopback, listening
  std::string upstream_host;  // the store: --master-addr
  int upstream_port = 0;
  std::string token;
  int node = 0;
  std::chrono::milliseconds connect_timeout{60000};  // reaching the store for one worker connection
};

// Relays until the process is signalled.
[[noreturn]] void relay_store(const StoreRelayOptions& opts);

// The uid owning the established local TCP socket whose address is `peer` and whose peer is `local`
// ("127.0.0.1:40312" as socket_peer_name and socket_local_endpoint print them: an accepted connection's two
// ends), from /proc/net/tcp and /proc/net/tcp6; -1 when it is not found. Both ends and the state, not the
// peer's address alone: a closed connection's TIME_WAIT entry, listed with uid 0, may hold the same address
// when its port is reused, and answered for the new socket (a stranger's connection then passed as root's).
long loopback_socket_uid(const std::string& peer, const std::string& local);

}  // namespace meshtrain::launch
