// The rendezvous store node 0's launcher hosts: a c10d::TCPStore server that workers (PyTorch's env://
// init with TORCHELASTIC_USE_AGENT_STORE=True, or meshtrain's store client) reach at MASTER_ADDR:MASTER_PORT.
//
// The launcher binds the listening socket itself, once, and hands a dup() of it to a fresh TCPStore for each
// attempt (TCPStoreOptions::masterListenFd). Why: (1) "port in use" is detected before any worker starts and
// reported with the port; (2) --standalone gets a free port with no bind/close/rebind race; (3) a restart
// starts from an empty store — keys of the failed attempt (Gloo/NCCL bootstrap addresses, barrier counters)
// cannot leak into the next one — while the port stays bound in between.
#pragma once

#include <memory>
#include <string>

namespace c10d {
class TCPStore;
}

namespace meshtrain::launch {

class RendezvousHost {
 public:
  // loopback_only: bind 127.0.0.1 (single node); else every interface (IPv6 dual-stack, IPv4 fallback).
  // port 0 picks a free port. Throws UserError naming the port when it is taken.
  RendezvousHost(int port, bool loopback_only);
  RendezvousHost(const RendezvousHost&) = delete;
  RendezvousHost& operator=(const RendezvousHost&) = delete;
  ~RendezvousHost();

  int port() const { return port_; }
  // Drops the previous round's store (if any) and serves an empty one on the same socket.
  void start_round(int attempt);
  // The current round's store (a server that is also a client of itself), for the launcher's own use.
  c10d::TCPStore& store();

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  bool loopback_ = true;
  std::shared_ptr<c10d::TCPStore> store_;
};

}  // namespace meshtrain::launch
