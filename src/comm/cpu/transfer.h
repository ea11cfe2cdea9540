// Transfers: the CPU backend's one I/O engine. An op is a set of byte transfers on the sockets to its peers
// (send this buffer to rank 2 while receiving that one from rank 1, ...); run_transfers drives them all on one
// thread with non-blocking sockets and poll(), so sends and receives overlap and no pair of ranks can
// deadlock on full socket buffers. Every wait is bounded by the op's deadline: on expiry it throws a
// CommTimeoutError naming the op, its sequence number, the group and the peers that did not deliver.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/cpu/socket.h"
#include "meshtrain/comm/comm_timeout_error.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

// What the op is, for error messages, and when it must be done by.
struct OpContext {
  std::string op;         // "all_reduce(sum)", "broadcast", ...
  std::uint64_t seq = 0;  // per-communicator sequence number of the op
  std::string group;      // the communicator's group name
  int rank = 0;           // this rank within the group
  int size = 1;
  std::chrono::milliseconds timeout{0};
  Deadline deadline{};
  std::string describe() const;  // "all_reduce(sum) seq 7 in group 'default' (rank 2 of 4)"
};

// One direction of one socket. Receives may report progress (so a ring step can reduce what has arrived while
// the rest is in flight); sends may be limited to what a receive has produced so far (pipelined forwarding).
struct Transfer {
  int peer = -1;              // rank at the other end, for messages
  int fd = -1;
  bool is_send = false;
  char* buf = nullptr;        // read from (send) or written to (recv)
  std::size_t len = 0;
  std::size_t done = 0;
  // recv: called after every read with `done` (bytes received so far).
  std::function<void(std::size_t)> on_progress;
  // send: if set, only bytes below *limit may be sent yet (the limit is raised by another transfer).
  const std::size_t* limit = nullptr;

  static Transfer send(int peer, const Socket& s, const void* buf, std::size_t len);
  static Transfer recv(int peer, const Socket& s, void* buf, std::size_t len);
};

// Reusable uninitialised buffers: a fresh multi-MiB std::vector per op costs a zero fill and page faults on
// every call, which dominated large all-reduces.
class Scratch {
 public:
  // Buffer `slot` (0 or 1) with at least n bytes; valid until the next call for the same slot.
  char* get(int slot, std::size_t n);

 private:
  std::unique_ptr<char[]> buf_[2];
  std::size_t cap_[2] = {0, 0};
};

// The connected sockets of one communicator: sockets[p] reaches rank p (sockets[rank] is unused). Owned and
// used by the communicator's op thread only (after construction), and so is the scratch space.
struct PeerLinks {
  int rank = 0;
  int size = 1;
  std::vector<Socket> sockets;
  mutable Scratch scratch;
  const Socket& to(int peer) const { return sockets[static_cast<std::size_t>(peer)]; }
};

// Runs until every transfer is done. Throws CommTimeoutError at ctx.deadline, Error when a peer closes its
// connection or a socket fails; the messages start with ctx.describe().
void run_transfers(std::span<Transfer> transfers, const OpContext& ctx);

}  // namespace meshtrain::comm
