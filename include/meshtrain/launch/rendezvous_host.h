// This node's part of the rendezvous: meshrun-store, a helper process that every launcher starts, serving
//   - on node 0, the store itself (store_server.h) on a socket bound to the rendezvous interface only: the
//     address --master-addr resolves to (loopback for a loopback master), never every interface;
//   - on every node, the workers' relay (store_relay.h) on 127.0.0.1, which presents the job's token for
//     them; the workers' MASTER_ADDR:MASTER_PORT is the relay.
// PyTorch's env:// init (TORCHELASTIC_USE_AGENT_STORE=True) and meshtrain's store client reach it
// unchanged; the other nodes' launchers reach node 0's store directly with the token (node_coordinator.h).
//
// The launcher binds both listening sockets itself and hands them to the helper: "port in use" and "not an
// address of this host" are reported with the flag before anything starts, --standalone gets a free port
// with no bind/close/rebind race, and a client that connects before the helper runs waits in the backlog.
// The token reaches the helper through its environment (readable by the job's user only), never a worker's.
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

struct RendezvousSpec {
  bool host_store = false;  // node 0: serve the store too
  std::string master_addr;  // where the store listens (node 0) / is reached (the relay)
  int master_port = 0;      // 0 on node 0: a free port
  int nnodes = 1;
  int node_rank = 0;
  std::string token;
  std::string store_exe;    // meshrun-store
};

class RendezvousHost {
 public:
  // Throws UserError naming the port when it is taken, the address when it is not this host's, or
  // `store_exe` (meshrun-store) when it is missing.
  explicit RendezvousHost(const RendezvousSpec& spec);
  RendezvousHost(const RendezvousHost&) = delete;
  RendezvousHost& operator=(const RendezvousHost&) = delete;
  ~RendezvousHost() = default;  // helper_'s destructor SIGKILLs and reaps the helper

  int port() const { return port_; }              // the store's (node 0), else the given master port
  int relay_port() const { return relay_port_; }  // the workers' MASTER_PORT on 127.0.0.1
  pid_t pid() const { return helper_.pid(); }
  // The helper's wait status once it has exited (it should not while the launcher runs), else nullopt.
  std::optional<int> exited();

 private:
  int port_ = 0, relay_port_ = 0;
  WorkerProcess helper_;
};

// Binds and listens on `addr` (a name or address of this host; each address it resolves to is tried in
// turn) at `port` (0: a free one); returns the socket (CLOEXEC) and sets `bound_port`. UserError when the
// port is in use or `addr` is not an address of this host, naming `flag` (e.g. "--master-addr").
int bind_store_socket(const std::string& addr, int port, const std::string& flag, int& bound_port);

}  // namespace meshtrain::launch
