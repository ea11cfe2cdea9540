// The rendezvous store node 0's launcher hosts: a c10d::TCPStore server that workers (PyTorch's env:// init
// with TORCHELASTIC_USE_AGENT_STORE=True, meshtrain's store client) and the other nodes' launchers reach at
// MASTER_ADDR:MASTER_PORT.
//
// The launcher binds the listening socket itself and hands it to meshrun-store, a helper process that links
// LibTorch and serves the real TCPStore on it (store_server.h). Why a helper: meshrun without LibTorch starts
// in milliseconds, and the helper's ~0.4 s of LibTorch loading overlaps the workers' own start-up (a client
// that connects early waits in the socket's backlog; none is refused). Why bind here: "port in use" is
// reported with the port before anything starts, and --standalone gets a free port with no bind/close/rebind
// race.
//
// One store serves the whole run, across restarts, as torchrun's agent store does: each attempt's keys are
// separate because PyTorch's env:// init wraps it in PrefixStore("/worker/attempt_<k>") and meshtrain's
// communicators prefix their keys with the attempt too. The launchers' own keys live under "meshrun/".
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "meshtrain/launch/worker_process.h"

namespace meshtrain::launch {

class RendezvousHost {
 public:
  // loopback_only: bind 127.0.0.1 (single node); else every interface (IPv6 dual-stack, IPv4 fallback).
  // port 0 picks a free port. Throws UserError naming the port when it is taken, or when `store_exe`
  // (meshrun-store) is missing.
  RendezvousHost(int port, bool loopback_only, const std::string& store_exe);
  RendezvousHost(const RendezvousHost&) = delete;
  RendezvousHost& operator=(const RendezvousHost&) = delete;
  ~RendezvousHost() = default;  // helper_'s destructor SIGKILLs and reaps the helper

  int port() const { return port_; }
  pid_t pid() const { return helper_.pid(); }
  // The helper's wait status once it has exited (it should not while the launcher runs), else nullopt.
  std::optional<int> exited();

 private:
  int port_ = 0;
  WorkerProcess helper_;
};

// Binds and listens (see RendezvousHost); returns the socket (CLOEXEC) and sets `bound_port`.
int bind_store_socket(int port, bool loopback_only, int& bound_port);

}  // namespace meshtrain::launch
