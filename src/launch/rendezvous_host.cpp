#include "meshtrain/launch/rendezvous_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/worker_env.h"

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

int bind_store_socket(int port, bool loopback_only, int& bound_port) {
  return bind_listen(port, loopback_only, bound_port);
}

RendezvousHost::RendezvousHost(int port, bool loopback_only, const std::string& store_exe) {
  MT_USER_CHECK(::access(store_exe.c_str(), X_OK) == 0, "meshrun: the rendezvous store helper ", store_exe,
                " is missing (it is built with meshrun: build the meshrun-store target)");
  int fd = bind_listen(port, loopback_only, port_);
  SpawnSpec spec;
  spec.argv = {store_exe, "--fd", std::to_string(fd), "--port", std::to_string(port_)};
  for (const auto& [k, v] : current_environment()) spec.env.push_back(k + "=" + v);  // LD_LIBRARY_PATH etc.
  spec.capture_output = false;  // its rare messages go straight to meshrun's stderr
  spec.pass_fds = {fd};
  try {
    helper_ = WorkerProcess::spawn(spec);
  } catch (...) {
    ::close(fd);
    throw;
  }
  // The helper owns the socket now. If it dies, the port closes and clients are refused at once instead of
  // waiting in a backlog nobody reads.
  ::close(fd);
}

std::optional<int> RendezvousHost::exited() {
  helper_.try_reap();
  return helper_.status();
}

}  // namespace meshtrain::launch
