// The rendezvous store's server: a real c10d::TCPStore, run in meshrun-store, a helper process that node 0's
// launcher starts (rendezvous_host.h). Kept out of meshrun so that meshrun does not load LibTorch: a launch
// of 8 workers is ~20 ms of work, and loading LibTorch was ~0.4 s of it. The helper gets the listening
// socket the launcher already bound (clients that connect while it is still loading wait in the kernel's
// backlog), serves until it is killed, and dies with the launcher (PR_SET_PDEATHSIG).
//
// This file is the only one of the launch room that sees LibTorch; it is built into its own library
// (meshtrain_launch_store), not into meshtrain_launch.
#pragma once

namespace meshtrain::launch {

// Serves a TCPStore on the listening socket `listen_fd` (bound to `port`) until the process is signalled.
// Never returns normally; throws Error when the store cannot start.
[[noreturn]] void serve_store(int listen_fd, int port);

}  // namespace meshtrain::launch
