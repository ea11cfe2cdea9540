// Socket RAII and deadline-bounded helpers; see socket.h.
#include "comm/cpu/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tcp_connect.h"

namespace meshtrain::comm {

int ms_until(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(d - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>((left + 999) / 1000);
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Socket Socket::listen_any(std::uint16_t port, int backlog) {
  Socket s(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = s.valid();
  if (v6) {
    int off = 0;  // dual stack: accept IPv4 peers too
    if (::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0) v6 = false;
  }
  int one = 1;
  if (v6) {
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) v6 = false;
  }
  if (!v6) {  // no IPv6 on this host
    s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    SYS_CHECK(s.fd(), "socket(AF_INET)");
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    SYS_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a), "bind port ", port);
  }
  SYS_CHECK(::listen(s.fd(), backlog), "listen");
  s.set_nonblocking();
  return s;
}

std::uint16_t Socket::local_port() const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  SYS_CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), "getsockname");
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

Socket Socket::accept(Deadline deadline, const std::string& waiting_for) const {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Socket s(fd);
      s.set_nodelay();
      return s;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      SYS_CHECK(-1, "accept");
    }
    int left = ms_until(deadline);
    MT_CHECK(left > 0, "timed out waiting for ", waiting_for, " to connect");
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno != EINTR) SYS_CHECK(-1, "poll(accept)");
  }
}

Socket Socket::connect(const std::string& host, std::uint16_t port, Deadline deadline) {
  return Socket(connect_with_retry(host, port, deadline));
}

namespace {

socklen_t unix_address(const std::string& name, sockaddr_un* a) {
  MT_CHECK(name.size() + 1 < sizeof a->sun_path, "unix socket name too long: ", name);
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] = '\0': abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

}  // namespace

Socket Socket::listen_unix(const std::string& name, int backlog) {
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  SYS_CHECK(s.fd(), "socket(AF_UNIX)");
  sockaddr_un a;
  socklen_t len = unix_address(name, &a);
  SYS_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), len), "bind unix socket @", name);
  SYS_CHECK(::listen(s.fd(), backlog), "listen");
  s.set_nonblocking();
  return s;
}

Socket Socket::connect_unix(const std::string& name, Deadline deadline) {
  sockaddr_un a;
  socklen_t len = unix_address(name, &a);
  for (;;) {
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    SYS_CHECK(s.fd(), "socket(AF_UNIX)");
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&a), len) == 0) {
      s.set_nonblocking();
      return s;
    }
    const int err = errno;
    if ((err != ECONNREFUSED && err != EAGAIN && err != ENOENT) || ms_until(deadline) == 0) {
      throw Error(cat("cannot connect to unix socket @", name, ": ", std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Socket Socket::accept_either(const Socket& a, const Socket& b, Deadline deadline, const std::string& waiting_for) {
  for (;;) {
    for (const Socket* l : {&a, &b}) {
      if (!l->valid()) continue;
      int fd = ::accept4(l->fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Socket s(fd);
        s.set_nodelay();  // a no-op (ignored failure) on Unix sockets
        return s;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) SYS_CHECK(-1, "accept");
    }
    int left = ms_until(deadline);
    MT_CHECK(left > 0, "timed out waiting for ", waiting_for, " to connect");
    pollfd p[2] = {{a.fd(), POLLIN, 0}, {b.fd(), POLLIN, 0}};  // poll ignores a negative fd
    int rc = ::poll(p, 2, left);
    if (rc < 0 && errno != EINTR) SYS_CHECK(-1, "poll(accept)");
  }
}

std::string same_host_key() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char ns[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (boot.empty() || n <= 0) return "";  // unknown: never treat two ranks as co-located
  return cat(boot, "/", host, "/", ns);
}

void Socket::set_nonblocking() {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  SYS_CHECK(flags, "fcntl(F_GETFL)");
  SYS_CHECK(::fcntl(fd_, F_SETFL, flags | O_NONBLOCK), "fcntl(F_SETFL)");
}

void Socket::set_nodelay() {
  int one = 1;  // small collectives are latency bound; never wait for Nagle
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void Socket::set_buffer_sizes(int bytes) {
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

namespace {

void wait_ready(const Socket& s, short events, Deadline deadline, const std::string& what, std::size_t done,
                std::size_t n) {
  int left = ms_until(deadline);
  MT_CHECK(left > 0, "timed out on ", what, " (", done, " of ", n, " bytes moved)");
  pollfd p{s.fd(), events, 0};
  int rc = ::poll(&p, 1, left);
  if (rc < 0 && errno != EINTR) SYS_CHECK(-1, "poll(", what, ")");
}

}  // namespace

void send_all(const Socket& s, const void* buf, std::size_t n, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    ssize_t k = ::send(s.fd(), p + done, n - done, MSG_NOSIGNAL);
    if (k > 0) {
      done += static_cast<std::size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_ready(s, POLLOUT, deadline, what, done, n);
      continue;
    }
    SYS_CHECK(-1, "send (", what, ")");
  }
}

void recv_all(const Socket& s, void* buf, std::size_t n, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    ssize_t k = ::recv(s.fd(), p + done, n - done, 0);
    if (k > 0) {
      done += static_cast<std::size_t>(k);
      continue;
    }
    MT_CHECK(k != 0, "peer closed the connection during ", what, " (", done, " of ", n, " bytes received)");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_ready(s, POLLIN, deadline, what, done, n);
      continue;
    }
    SYS_CHECK(-1, "recv (", what, ")");
  }
}

std::string local_address_towards(const std::string& remote_host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(remote_host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "";
  std::string out;
  for (addrinfo* ai = res; ai != nullptr && out.empty(); ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s.valid() || ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) continue;
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    const void* src = a.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr)
                                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&a)->sin_addr);
    if (::inet_ntop(a.ss_family, src, buf, sizeof buf) != nullptr) out = buf;
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace meshtrain::comm
