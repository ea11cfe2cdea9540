// c10d::TCPStore wire protocol, client side (see store_client.h for where the format comes from).
#include "meshtrain/launch/store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;

// c10d::detail::QueryType and friends (TCPStoreBackend.hpp); the order is the protocol.
enum class Query : uint8_t { VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT };
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kCheckReady = 0;    // CheckResponseType::READY
constexpr uint8_t kStopWaiting = 0;   // WaitResponseType::STOP_WAITING
const std::string kKeyPrefix = "/";   // TCPStore::keyPrefix_

template <typename T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void put_string(std::string& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b += s;
}

// One non-blocking connect attempt bounded by `deadline`; returns the fd or -1 with errno set.
int try_connect(const addrinfo* ai, Clock::time_point deadline) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd == -1) return -1;
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == -1) {
    if (errno != EINPROGRESS) {
      int e = errno;
      ::close(fd);
      errno = e;
      return -1;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::max<long long>(1, left)));
    int err = ETIMEDOUT;
    socklen_t len = sizeof(err);
    if (rc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
                         std::chrono::milliseconds op_timeout)
    : endpoint_(host + ":" + std::to_string(port)) {
  const auto deadline = Clock::now() + connect_timeout;
  std::string last_error = "no address";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (g != 0) {
      last_error = ::gai_strerror(g);  // DNS may come up later (a node still booting): retry too
    } else {
      for (addrinfo* ai = res; ai && fd_ == -1; ai = ai->ai_next) {
        fd_ = try_connect(ai, deadline);
        if (fd_ == -1) last_error = std::strerror(errno);
      }
      ::freeaddrinfo(res);
    }
    if (fd_ != -1 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  MT_USER_CHECK(fd_ != -1, "meshrun: cannot reach the rendezvous store at ", endpoint_,
                " (node 0's launcher, --master-addr/--master-port) within ",
                std::chrono::duration<double>(connect_timeout).count(), " s: ", last_error,
                "; is node 0's meshrun running, and is the port open between the nodes?");
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(op_timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((op_timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string b;
  put(b, Query::VALIDATE);
  put(b, kValidationMagic);
  send_all(b);
}

StoreClient::~StoreClient() {
  if (fd_ != -1) ::close(fd_);
}

void StoreClient::send_all(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n == -1 && errno == EINTR) continue;
    if (n <= 0) throw Error(cat("meshrun: lost the rendezvous store at ", endpoint_, ": ", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
}

void StoreClient::recv_all(void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd_, p, n, 0);
    if (r == -1 && errno == EINTR) continue;
    if (r == 0) throw Error(cat("meshrun: lost the rendezvous store at ", endpoint_, ": connection closed"));
    if (r < 0)
      throw Error(cat("meshrun: lost the rendezvous store at ", endpoint_, ": ",
                      errno == EAGAIN ? "no answer in time" : std::strerror(errno)));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  std::string b;
  put(b, Query::ADD);
  put_string(b, kKeyPrefix + key);
  put<int64_t>(b, delta);
  send_all(b);
  int64_t v = 0;
  recv_all(&v, sizeof(v));
  return v;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::string b;
  put(b, Query::SET);
  put_string(b, kKeyPrefix + key);
  put_string(b, value);  // bytes are sent like strings: uint64 length + data
  send_all(b);
}

std::string StoreClient::get(const std::string& key) {
  std::string b;
  put(b, Query::WAIT);
  put<uint64_t>(b, 1);
  put_string(b, kKeyPrefix + key);
  send_all(b);
  uint8_t wait_reply = 0xff;
  recv_all(&wait_reply, 1);
  MT_CHECK(wait_reply == kStopWaiting, "store WAIT answered ", int(wait_reply));
  // GET only after the WAIT is answered: the server would answer a GET of a missing key with an error.
  b.clear();
  put(b, Query::GET);
  put_string(b, kKeyPrefix + key);
  send_all(b);
  uint64_t len = 0;
  recv_all(&len, sizeof(len));
  std::string v(len, '\0');
  if (len) recv_all(v.data(), len);
  return v;
}

bool StoreClient::check(const std::string& key) {
  std::string b;
  put(b, Query::CHECK);
  put<uint64_t>(b, 1);
  put_string(b, kKeyPrefix + key);
  send_all(b);
  uint8_t r = 0xff;
  recv_all(&r, 1);
  return r == kCheckReady;
}

}  // namespace meshtrain::launch
