// meshrun-store's body: c10d::TCPStore on an inherited listening socket (see store_server.h).
#include "meshtrain/launch/store_server.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {

void serve_store(int listen_fd, int port) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;       // workers come and go across restarts; nobody is waited for here
  opts.masterListenFd = listen_fd;  // bound by the launcher: port-in-use was already reported there
  opts.timeout = std::chrono::seconds(300);
  std::unique_ptr<c10d::TCPStore> store;
  try {
    store = std::make_unique<c10d::TCPStore>("127.0.0.1", opts);
  } catch (const std::exception& e) {
    throw Error(cat("meshrun-store: cannot serve the rendezvous store on port ", port, ": ", e.what()));
  }
  // The server runs on its own thread; this one only waits to be stopped (SIGTERM/SIGKILL from the
  // launcher, or PDEATHSIG when the launcher dies). The default disposition ends the process: no cleanup
  // is needed, the socket goes with it.
  sigset_t none;
  sigemptyset(&none);
  for (;;) ::sigsuspend(&none);
}

}  // namespace meshtrain::launch
