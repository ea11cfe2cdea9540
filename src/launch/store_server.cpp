// The rendezvous store's server (see store_server.h for what it guarantees).
#include "meshtrain/launch/store_server.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"
#include "meshtrain/launch/store_key_policy.h"
#include "meshtrain/launch/store_peer.h"
#include "meshtrain/launch/store_request.h"

namespace meshtrain::launch {
namespace {

// A request the server refuses: the peer's connection is closed with this line.
struct PeerRefused {
  std::string what;
};

struct StorePeer {
  int fd = -1;
  std::string name;  // address, then "<role> of node N (address)" once it said HELLO
  std::string in, out;
  size_t out_off = 0;
  bool hello = false, validated = false;
  PeerRole role = PeerRole::Workers;
  int node = -1;
  Clock::time_point accepted, partial_since;
  std::vector<std::string> waiting;  // keys of a WAIT not answered yet
};

// Tokens compared in constant time: the time of a refusal says nothing about how much of a guess was right.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// ADD's operand: the decimal integer c10d stores ("-12"); false for anything else.
bool parse_counter(const std::string& s, int64_t& v) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  int64_t x = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, s[i] - '0', &x)) return false;
  }
  v = s[0] == '-' ? -x : x;
  return true;
}

class StoreServer {
 public:
  explicit StoreServer(const StoreServerOptions& o) : opts_(o) {}
  [[noreturn]] void run();

 private:
  void accept_all();
  void on_readable(StorePeer& p);
  void on_request(StorePeer& p, const StoreRequest& r);
  void on_hello(StorePeer& p, const StoreRequest& r);
  void on_data_request(StorePeer& p, const StoreRequest& r);
  void check_keys(const StorePeer& p, const StoreRequest& r, bool write) const;
  int64_t add(const std::string& key, int64_t delta);
  bool exists(const std::string& key) const;
  void wake_waiters();
  void sweep_timeouts();
  void drop(StorePeer& p, const std::string& why);

  StoreServerOptions opts_;
  std::vector<std::unique_ptr<StorePeer>> peers_;
  std::map<std::string, std::string> data_;
  std::map<std::string, std::deque<std::string>> queues_;
  bool changed_ = false;  // a key was set since the waiters were last looked at
};

void StoreServer::drop(StorePeer& p, const std::string& why) {
  if (!why.empty()) {
    std::fprintf(stderr, "meshrun-store: closed %s: %s\n", p.name.c_str(), why.c_str());
    std::fflush(stderr);
  }
  ::close(p.fd);
  p.fd = -1;
}

void StoreServer::accept_all() {
  for (int fd; (fd = accept_nonblocking(opts_.listen_fd)) != -1;) {
    auto p = std::make_unique<StorePeer>();
    p->fd = fd;
    p->name = socket_peer_name(fd);
    p->accepted = Clock::now();
    if (peers_.size() >= opts_.max_connections) {
      drop(*p, cat("over ", opts_.max_connections, " open connections"));
      continue;
    }
    peers_.push_back(std::move(p));
  }
}

void StoreServer::check_keys(const StorePeer& p, const StoreRequest& r, bool write) const {
  for (const auto& k : r.keys)
    if (std::string no = store_key_refusal(p.role, p.node, k, write); !no.empty()) throw PeerRefused{no};
}

bool StoreServer::exists(const std::string& key) const {
  if (data_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

int64_t StoreServer::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  auto it = data_.find(key);
  if (it != data_.end() && !parse_counter(it->second, v))
    throw PeerRefused{cat("ADD to '", key, "', whose value is not an integer")};
  if (__builtin_add_overflow(v, delta, &v)) throw PeerRefused{cat("ADD to '", key, "' overflows 64 bits")};
  data_[key] = std::to_string(v);
  changed_ = true;
  return v;
}

void StoreServer::on_hello(StorePeer& p, const StoreRequest& r) {
  if (p.hello) throw PeerRefused{"a second HELLO"};
  if (!same_token(r.token, opts_.token)) throw PeerRefused{"HELLO with a wrong token"};
  if (r.node < 0 || r.node >= opts_.nnodes)
    throw PeerRefused{cat("HELLO for node ", r.node, " of a ", opts_.nnodes, "-node job")};
  p.hello = true;
  p.role = r.role;
  p.node = r.node;
  p.name = cat(r.role == PeerRole::Launcher ? "the launcher" : "a worker", " connection of node ", r.node, " (",
               p.name, ")");
  p.out.push_back(static_cast<char>(kHelloAccepted));
}

void StoreServer::on_request(StorePeer& p, const StoreRequest& r) {
  if (r.query == StoreQuery::HELLO) return on_hello(p, r);
  if (!p.hello)
    throw PeerRefused{cat("sent ", store_query_name(static_cast<uint8_t>(r.query)),
                          " without a HELLO carrying the job's token (only meshrun's launchers and relays may "
                          "connect)")};
  if (!p.validated) {
    if (r.query != StoreQuery::VALIDATE) throw PeerRefused{"its first request after HELLO is not VALIDATE"};
    if (r.number != kStoreValidationMagic) throw PeerRefused{cat("VALIDATE with a bad magic number ", r.number)};
    p.validated = true;
    return;
  }
  on_data_request(p, r);
}

void StoreServer::on_data_request(StorePeer& p, const StoreRequest& r) {
  const std::string& key = r.keys.empty() ? std::string() : r.keys[0];
  std::string& out = p.out;
  switch (r.query) {
    case StoreQuery::VALIDATE:
      throw PeerRefused{"a second VALIDATE"};
    case StoreQuery::PING:
      store_put_value(out, r.number);
      return;
    case StoreQuery::SET:
    case StoreQuery::MULTI_SET:
      check_keys(p, r, true);
      for (size_t i = 0; i < r.keys.size(); ++i) data_[r.keys[i]] = r.values[i];
      changed_ = true;
      return;
    case StoreQuery::COMPARE_SET: {
      check_keys(p, r, true);
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (r.values[0].empty()) data_[key] = r.values[1], changed_ = true;
        store_put_bytes(out, r.values[0].empty() ? r.values[1] : r.values[0]);
      } else {
        if (it->second == r.values[0]) it->second = r.values[1], changed_ = true;
        store_put_bytes(out, it->second);
      }
      return;
    }
    case StoreQuery::GET:
    case StoreQuery::MULTI_GET:
      check_keys(p, r, false);
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        store_put_bytes(out, it == data_.end() ? std::string() : it->second);  // c10d's libuv server: empty
      }
      return;
    case StoreQuery::ADD:
      check_keys(p, r, true);
      store_put_value<int64_t>(out, add(key, r.delta));
      return;
    case StoreQuery::CHECK: {
      check_keys(p, r, false);
      bool all = true;
      for (const auto& k : r.keys) all = all && exists(k);
      store_put_value<uint8_t>(out, all ? kStoreCheckReady : kStoreCheckNotReady);
      return;
    }
    case StoreQuery::WAIT:
      check_keys(p, r, false);
      if (!p.waiting.empty()) throw PeerRefused{"a WAIT while its previous WAIT is still pending"};
      p.waiting = r.keys;
      changed_ = true;  // answered by wake_waiters() when every key is there (maybe at once)
      return;
    case StoreQuery::GETNUMKEYS:
      store_put_value<int64_t>(out, static_cast<int64_t>(data_.size()));
      return;
    case StoreQuery::DELETE_KEY:
      check_keys(p, r, true);
      store_put_value<int64_t>(out, static_cast<int64_t>(data_.erase(key)));
      return;
    case StoreQuery::APPEND:
      check_keys(p, r, true);
      if (data_[key].size() + r.values[0].size() > kStoreMaxValueBytes)
        throw PeerRefused{cat("APPEND makes '", key, "' longer than ", kStoreMaxValueBytes, " bytes")};
      data_[key] += r.values[0];
      changed_ = true;
      return;
    case StoreQuery::CANCEL_WAIT:
      p.waiting.clear();
      store_put_value<uint8_t>(out, kStoreWaitCanceled);
      return;
    case StoreQuery::QUEUE_PUSH:
      check_keys(p, r, true);
      queues_[key].push_back(r.values[0]);
      changed_ = true;
      return;
    case StoreQuery::QUEUE_POP: {
      check_keys(p, r, true);
      auto q = queues_.find(key);
      if (q == queues_.end() || q->second.empty()) throw PeerRefused{cat("QUEUE_POP of the empty queue '", key, "'")};
      store_put_bytes(out, q->second.front());
      q->second.pop_front();
      return;
    }
    case StoreQuery::QUEUE_LEN: {
      check_keys(p, r, false);
      auto q = queues_.find(key);
      store_put_value<int64_t>(out, q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size()));
      return;
    }
    case StoreQuery::HELLO:
    case StoreQuery::LIST_KEYS:
      break;
  }
  throw PeerRefused{cat("unsupported ", store_query_name(static_cast<uint8_t>(r.query)))};
}

void StoreServer::on_readable(StorePeer& p) {
  const bool had_partial = !p.in.empty();
  const int rc = recv_some(p.fd, p.in);
  if (rc == -1) return;
  if (rc <= 0) {
    if (!p.in.empty())
      return drop(p, cat("closed in the middle of a request (", p.in.size(), " bytes of it received)"));
    return drop(p, p.hello ? "" : "closed the connection without a HELLO");
  }
  if (!had_partial) p.partial_since = Clock::now();
  try {
    for (;;) {
      StoreRequest r;
      size_t used = 0;
      std::string problem;
      const ParseStatus st = parse_store_request(p.in.data(), p.in.size(), r, used, problem);
      if (st == ParseStatus::Malformed) throw PeerRefused{problem};
      if (st == ParseStatus::Incomplete) break;
      on_request(p, r);
      p.in.erase(0, used);
      p.partial_since = Clock::now();
    }
    if (p.in.size() > kStoreMaxRequestBytes)
      throw PeerRefused{cat("more than ", kStoreMaxRequestBytes, " bytes without a complete request")};
  } catch (const PeerRefused& e) {
    return drop(p, e.what);
  }
}

void StoreServer::wake_waiters() {
  if (!changed_) return;
  changed_ = false;
  for (auto& p : peers_) {
    if (p->fd == -1 || p->waiting.empty()) continue;
    bool all = true;
    for (const auto& k : p->waiting) all = all && exists(k);
    if (!all) continue;
    p->waiting.clear();
    store_put_value<uint8_t>(p->out, kStoreStopWaiting);
  }
}

void StoreServer::sweep_timeouts() {
  const auto now = Clock::now();
  for (auto& p : peers_) {
    if (p->fd == -1) continue;
    if (!p->hello && now - p->accepted > opts_.hello_timeout)
      drop(*p, cat("no HELLO within ", opts_.hello_timeout.count(), " ms"));
    else if (!p->in.empty() && now - p->partial_since > opts_.request_timeout)
      drop(*p, cat("a request left incomplete for ", opts_.request_timeout.count(), " ms"));
    else if (p->out.size() - p->out_off > kStoreMaxRequestBytes)
      drop(*p, cat("more than ", kStoreMaxRequestBytes, " bytes of answers left unread"));
  }
}

void StoreServer::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign(1, pollfd{opts_.listen_fd, POLLIN, 0});
    for (auto& p : peers_)
      fds.push_back(pollfd{p->fd, static_cast<short>(POLLIN | (p->out.size() > p->out_off ? POLLOUT : 0)), 0});
    int n = ::poll(fds.data(), fds.size(), 200);
    if (n == -1 && errno != EINTR) throw Error(cat("meshrun-store: poll: ", std::strerror(errno)));
    if (n > 0 && (fds[0].revents & POLLIN)) accept_all();
    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      StorePeer& p = *peers_[i - 1];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(p);
    }
    wake_waiters();
    for (auto& p : peers_)
      if (p->fd != -1 && !send_pending(p->fd, p->out, p->out_off)) drop(*p, p->hello ? "" : "gone before HELLO");
    sweep_timeouts();
    std::erase_if(peers_, [](const auto& p) { return p->fd == -1; });
  }
}

}  // namespace

void serve_store(const StoreServerOptions& opts) {
  set_nonblocking(opts.listen_fd);  // accept until none is pending, never wait in accept
  ::signal(SIGPIPE, SIG_IGN);
  StoreServer(opts).run();
}

}  // namespace meshtrain::launch
