#include "meshtrain/launch/rendezvous_host.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/rdzv_token.h"
#include "meshtrain/launch/worker_env.h"

namespace meshtrain::launch {
namespace {

// One bind + listen attempt on a resolved address; the socket, or -1 with `err` set.
int listen_on(const addrinfo& ai, int port, int& err) {
  int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    err = errno;
    return -1;
  }
  int one = 1;
  // SO_REUSEADDR: a previous run's sockets in TIME_WAIT must not block the port (it does not let two live
  // listeners share it).
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage a{};
  std::memcpy(&a, ai.ai_addr, ai.ai_addrlen);
  if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(static_cast<uint16_t>(port));
  else reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), ai.ai_addrlen) == -1 || ::listen(fd, 4096) == -1) {
    err = errno;
    ::close(fd);
    return -1;
  }
  return fd;
}

int bound_port_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  SYS_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len), "getsockname");
  return ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

int bind_store_socket(const std::string& addr, int port, const std::string& flag, int& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string host = addr.size() > 2 && addr.front() == '[' ? addr.substr(1, addr.size() - 2) : addr;
  const int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  MT_USER_CHECK(gai == 0, "meshrun: ", flag, " ", addr, " does not resolve: ", ::gai_strerror(gai));
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai && fd == -1; ai = ai->ai_next) fd = listen_on(*ai, port, err);
  ::freeaddrinfo(res);
  if (fd == -1) {
    MT_USER_CHECK(err != EADDRINUSE, "meshrun: --master-port ", port,
                  " is already in use on this host (another run?); pick a free one with --master-port, "
                  "or use --standalone for a free port");
    MT_USER_CHECK(err != EADDRNOTAVAIL, "meshrun: ", flag, " ", addr, " is not an address of this host, and node 0 "
                  "hosts the rendezvous store on it (it listens there only); give node 0's own address or name");
    throw UserError(cat("meshrun: cannot listen on ", addr, ":", port, ": ", std::strerror(err)));
  }
  bound_port = bound_port_of(fd);
  return fd;
}

RendezvousHost::RendezvousHost(const RendezvousSpec& s) : port_(s.master_port) {
  MT_USER_CHECK(::access(s.store_exe.c_str(), X_OK) == 0, "meshrun: the rendezvous store helper ", s.store_exe,
                " is missing (it is built with meshrun: build the meshrun-store target)");
  SpawnSpec spec;
  spec.argv = {s.store_exe};
  int store_fd = -1;
  if (s.host_store) {
    store_fd = bind_store_socket(s.master_addr, s.master_port, "--master-addr", port_);
    spec.argv.insert(spec.argv.end(), {"--store-fd", std::to_string(store_fd), "--nnodes", std::to_string(s.nnodes)});
    spec.pass_fds.push_back(store_fd);
  }
  const int relay_fd = bind_store_socket("127.0.0.1", 0, "the relay", relay_port_);
  spec.argv.insert(spec.argv.end(), {"--relay-fd", std::to_string(relay_fd), "--upstream", s.master_addr, "--port",
                                     std::to_string(port_), "--node", std::to_string(s.node_rank)});
  spec.pass_fds.push_back(relay_fd);
  auto env = current_environment();  // LD_LIBRARY_PATH etc.
  env[kRdzvTokenEnv] = s.token;
  for (const auto& [k, v] : env) spec.env.push_back(k + "=" + v);
  spec.capture_output = false;  // its one-line reports go straight to meshrun's stderr
  try {
    helper_ = WorkerProcess::spawn(spec);
  } catch (...) {
    if (store_fd != -1) ::close(store_fd);
    ::close(relay_fd);
    throw;
  }
  // The helper owns the sockets now. If it dies, the ports close and clients are refused at once instead of
  // waiting in a backlog nobody reads.
  if (store_fd != -1) ::close(store_fd);
  ::close(relay_fd);
}

std::optional<int> RendezvousHost::exited() {
  helper_.try_reap();
  return helper_.status();
}

}  // namespace meshtrain::launch
