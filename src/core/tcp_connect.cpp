// connect_with_retry: getaddrinfo + non-blocking connect, retried until the deadline; see tcp_connect.h.
#include "meshtrain/core/tcp_connect.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace meshtrain {
namespace {

// Milliseconds left until `deadline`, at least 1 so that poll() waits rather than spins on a sub-ms rest.
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 1, 1 << 30));
}

// One connect attempt to one address, bounded by `deadline`: the connected descriptor, or -1 with `why` set.
int try_connect(const addrinfo& ai, Clock::time_point deadline, std::string& why) {
  const int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol);
  if (fd == -1) {
    why = std::strerror(errno);
    return -1;
  }
  int err = ::connect(fd, ai.ai_addr, ai.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {  // the handshake runs; its outcome is the socket's SO_ERROR once writable
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (::poll(&p, 1, ms_left(deadline)) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = ETIMEDOUT;
  }
  if (err != 0) {
    ::close(fd);
    why = std::strerror(err);
    return -1;
  }
  return fd;
}

// One round: every address `host` resolves to, in the resolver's order.
int try_addresses(const std::string& host, int port, Clock::time_point deadline, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); g != 0) {
    why = ::gai_strerror(g);
    return -1;
  }
  int fd = -1;
  for (const addrinfo* ai = res; ai != nullptr && fd == -1; ai = ai->ai_next) fd = try_connect(*ai, deadline, why);
  ::freeaddrinfo(res);
  return fd;
}

}  // namespace

int connect_with_retry(const std::string& host, int port, Clock::time_point deadline,
                       std::chrono::milliseconds retry_every) {
  const auto start = Clock::now();
  std::string why = "no address";
  for (;;) {
    const int fd = try_addresses(host, port, deadline, why);
    if (fd != -1) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(retry_every, deadline - Clock::now()));
  }
  const double waited = std::chrono::duration<double>(deadline - start).count();
  throw ConnectError(cat("cannot connect to ", host, ":", port, " within ", waited, " s: ", why), why);
}

}  // namespace meshtrain
