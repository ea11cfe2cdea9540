// c10d::TCPStore wire protocol, client side (see store_client.h for where the format comes from).
#include "meshtrain/launch/store_client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tcp_connect.h"
#include "meshtrain/launch/store_peer.h"

namespace meshtrain::launch {
namespace {

using Query = StoreQuery;
const std::string kKeyPrefix = "/";   // TCPStore::keyPrefix_

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, const StoreCredentials& who,
                         std::chrono::milliseconds connect_timeout, std::chrono::milliseconds op_timeout)
    : endpoint_(host + ":" + std::to_string(port)) {
  try {
    // Retried every 100 ms: node 0's launcher may start after this one.
    fd_ = connect_with_retry(host, port, Clock::now() + connect_timeout, std::chrono::milliseconds(100));
  } catch (const ConnectError& e) {
    throw UserError(cat("meshrun: cannot reach the rendezvous store at ", endpoint_,
                        " (node 0's launcher, --master-addr/--master-port) within ",
                        std::chrono::duration<double>(connect_timeout).count(), " s: ", e.reason(),
                        "; is node 0's meshrun running, and is the port open between the nodes?"));
  }
  // Requests block, each bounded by the receive and send timeouts below.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(op_timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((op_timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string b;
  store_put_value(b, Query::HELLO);
  store_put_bytes(b, who.token);
  store_put_value(b, who.role);
  store_put_value<int32_t>(b, who.node);
  send_all(b);
  uint8_t answer = 0;
  try {
    recv_all(&answer, 1);
  } catch (const Error&) {
    answer = 0;
  }
  MT_USER_CHECK(answer == kHelloAccepted, "meshrun: the rendezvous store at ", endpoint_,
                " refused this node's token: every node needs the same ", "MESHRUN_RDZV_TOKEN or --rdzv-conf "
                "token_file (node 0's store says why in its log)");
  b.clear();
  store_put_value(b, Query::VALIDATE);
  store_put_value(b, kStoreValidationMagic);
  send_all(b);
}

std::string StoreClient::local_address() const { return socket_local_name(fd_); }

StoreClient::~StoreClient() {
  if (fd_ != -1) ::close(fd_);
}

void StoreClient::send_all(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n == -1 && errno == EINTR) continue;
    if (n <= 0) throw StoreLost(cat("meshrun: lost the rendezvous store at ", endpoint_, ": ", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
}

void StoreClient::recv_all(void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd_, p, n, 0);
    if (r == -1 && errno == EINTR) continue;
    if (r == 0) throw StoreLost(cat("meshrun: lost the rendezvous store at ", endpoint_, ": connection closed"));
    if (r < 0)
      throw StoreLost(cat("meshrun: lost the rendezvous store at ", endpoint_, ": ",
                      errno == EAGAIN ? "no answer in time" : std::strerror(errno)));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  std::string b;
  store_put_value(b, Query::ADD);
  store_put_bytes(b, kKeyPrefix + key);
  store_put_value<int64_t>(b, delta);
  send_all(b);
  int64_t v = 0;
  recv_all(&v, sizeof(v));
  return v;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::string b;
  store_put_value(b, Query::SET);
  store_put_bytes(b, kKeyPrefix + key);
  store_put_bytes(b, value);  // bytes are sent like strings: uint64 length + data
  send_all(b);
}

std::string StoreClient::get(const std::string& key) {
  std::string b;
  store_put_value(b, Query::WAIT);
  store_put_value<uint64_t>(b, 1);
  store_put_bytes(b, kKeyPrefix + key);
  send_all(b);
  uint8_t wait_reply = 0xff;
  recv_all(&wait_reply, 1);
  MT_CHECK(wait_reply == kStoreStopWaiting, "store WAIT answered ", int(wait_reply));
  // GET only after the WAIT is answered: the server would answer a GET of a missing key with an error.
  b.clear();
  store_put_value(b, Query::GET);
  store_put_bytes(b, kKeyPrefix + key);
  send_all(b);
  uint64_t len = 0;
  recv_all(&len, sizeof(len));
  std::string v(len, '\0');
  if (len) recv_all(v.data(), len);
  return v;
}

bool StoreClient::check(const std::string& key) {
  std::string b;
  store_put_value(b, Query::CHECK);
  store_put_value<uint64_t>(b, 1);
  store_put_bytes(b, kKeyPrefix + key);
  send_all(b);
  uint8_t r = 0xff;
  recv_all(&r, 1);
  return r == kStoreCheckReady;
}

}  // namespace meshtrain::launch
