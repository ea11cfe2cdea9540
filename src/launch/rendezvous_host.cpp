#include "meshtrain/launch/rendezvous_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

int bind_listen(int port, bool loopback, int& bound_port) {
  int fd = -1;
  int err = 0;
  auto attempt = [&](int family) {
    fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1) {
      err = errno;
      return false;
    }
    int one = 1;
    // SO_REUSEADDR: a previous run's sockets in TIME_WAIT must not block the port (it does not let two
    // live listeners share it).
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (family == AF_INET6) {
      int zero = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    if (rc == -1 || ::listen(fd, 4096) == -1) {
      err = errno;
      ::close(fd);
      fd = -1;
      return false;
    }
    return true;
  };
  bool ok = (!loopback && attempt(AF_INET6)) || attempt(AF_INET);
  if (!ok) {
    MT_USER_CHECK(err != EADDRINUSE, "meshrun: --master-port ", port,
                  " is already in use on this host (another run?); pick a free one with --master-port, "
                  "or use --standalone for a free port");
    throw UserError(cat("meshrun: cannot listen on port ", port, ": ", std::strerror(err)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  SYS_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len), "getsockname");
  bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

}  // namespace

RendezvousHost::RendezvousHost(int port, bool loopback_only) : loopback_(loopback_only) {
  listen_fd_ = bind_listen(port, loopback_only, port_);
}

RendezvousHost::~RendezvousHost() {
  store_.reset();  // the server thread stops and closes its dup of the socket first
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void RendezvousHost::start_round(int attempt) {
  store_.reset();
  int fd = ::dup(listen_fd_);  // the TCPStore server owns and closes this one; ours keeps the port bound
  SYS_CHECK(fd, "dup listen socket");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port_);
  opts.isServer = true;
  opts.waitWorkers = false;  // workers come and go; the launcher never blocks on them here
  opts.masterListenFd = fd;
  opts.timeout = std::chrono::seconds(300);
  try {
    store_ = std::make_shared<c10d::TCPStore>("127.0.0.1", opts);
  } catch (const std::exception& e) {
    throw Error(cat("meshrun: cannot start the rendezvous store on port ", port_, ": ", e.what()));
  }
  std::string a = std::to_string(attempt);
  store_->set("meshrun/attempt", std::vector<uint8_t>(a.begin(), a.end()));
}

c10d::TCPStore& RendezvousHost::store() {
  MT_CHECK(store_, "RendezvousHost::store() before start_round()");
  return *store_;
}

}  // namespace meshtrain::launch
