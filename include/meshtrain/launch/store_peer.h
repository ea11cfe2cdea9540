// Small socket helpers shared by the store's server and relay: a peer's printable address, a non-blocking
// accept, and the buffered send of a non-blocking socket.
#pragma once

#include <string>

namespace meshtrain::launch {

// "127.0.0.1:40312", "[::1]:40312"; "?" when the socket has no peer.
std::string socket_peer_name(int fd);

// This end's address and port of a socket, as socket_peer_name prints a peer's; "?" when unknown.
std::string socket_local_endpoint(int fd);

// This end's address of a connected socket, without the port ("10.0.0.2", "::1"); "" when unknown.
std::string socket_local_name(int fd);

// O_NONBLOCK on `fd` (an inherited listening socket: accept_nonblocking must not wait).
void set_nonblocking(int fd);

// Accepts one pending connection as a non-blocking, close-on-exec socket; -1 when none is pending (or on a
// transient error).
int accept_nonblocking(int listen_fd);

// Sends as much of out[off...] as the socket takes now; advances `off` and compacts `out` once all is sent.
// false when the peer is gone.
bool send_pending(int fd, std::string& out, size_t& off);

// Reads what is available into `in` (up to a 64 KiB chunk). 1: bytes read; 0: the peer closed; -1: nothing
// now (EAGAIN); -2: an error (treated as closed).
int recv_some(int fd, std::string& in);

}  // namespace meshtrain::launch
