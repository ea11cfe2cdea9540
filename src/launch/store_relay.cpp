// The workers' relay to the rendezvous store (see store_relay.h).
#include "meshtrain/launch/store_relay.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tcp_connect.h"
#include "meshtrain/launch/store_peer.h"
#include "meshtrain/launch/store_protocol.h"

namespace meshtrain::launch {
namespace {

// Bytes held for a side that does not read: past this the other side is not read from until it drains.
constexpr size_t kRelayHighWater = 4 * 1024 * 1024;

struct RelaySide {
  int fd = -1;
  std::string out;  // bytes waiting to be sent to this side
  size_t out_off = 0;
  bool eof = false;  // this side closed its end: nothing more to read from it
  size_t pending() const { return out.size() - out_off; }
};

struct RelayPair {
  std::string name;
  RelaySide down, up;  // the worker, the store
  bool accepted = false;  // the store accepted our HELLO; until then its first byte is the answer
};

// /proc/net/tcp{,6}'s address column of a socket: "0100007F:9D98" for 127.0.0.1:40344 (each 32-bit word as
// the kernel prints it: its raw bytes read as a host-order integer), IPv6 as four such words. An IPv4 peer
// may be a dual-stack client socket (PyTorch's), listed in tcp6 as ::ffff:a.b.c.d: both forms are returned.
std::vector<std::string> proc_net_addresses(const std::string& peer) {
  const auto colon = peer.rfind(':');
  if (colon == std::string::npos) return {};
  std::string host = peer.substr(0, colon);
  const int port = std::atoi(peer.c_str() + colon + 1);
  in6_addr a6{};
  char buf[64];
  std::vector<std::string> out;
  if (host.size() > 2 && host.front() == '[') {
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) != 1) return {};
  } else {
    in_addr a{};
    if (::inet_pton(AF_INET, host.c_str(), &a) != 1) return {};
    std::snprintf(buf, sizeof(buf), "%08X:%04X", a.s_addr, port);
    out.push_back(buf);
    a6.s6_addr[10] = a6.s6_addr[11] = 0xff;
    std::memcpy(&a6.s6_addr[12], &a.s_addr, 4);
  }
  uint32_t w[4];
  std::memcpy(w, &a6, sizeof(w));
  std::snprintf(buf, sizeof(buf), "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3], port);
  out.push_back(buf);
  return out;
}

void relay_line(const std::string& who, const std::string& what) {
  std::fprintf(stderr, "meshrun-store: relay: %s: %s\n", who.c_str(), what.c_str());
  std::fflush(stderr);
}

void put_hello(std::string& b, const StoreRelayOptions& o) {
  b.push_back(static_cast<char>(StoreQuery::HELLO));
  const uint64_t len = o.token.size();
  b.append(reinterpret_cast<const char*>(&len), sizeof(len));
  b += o.token;
  b.push_back(static_cast<char>(PeerRole::Workers));
  const int32_t node = o.node;
  b.append(reinterpret_cast<const char*>(&node), sizeof(node));
}

class StoreRelay {
 public:
  explicit StoreRelay(const StoreRelayOptions& o) : opts_(o) {}
  [[noreturn]] void run();

 private:
  void accept_one(int fd);
  void read_side(RelayPair& p, RelaySide& from, RelaySide& to, bool upstream);
  static void close_pair(RelayPair& p);

  StoreRelayOptions opts_;
  std::vector<std::unique_ptr<RelayPair>> pairs_;
};

void StoreRelay::accept_one(int fd) {
  auto p = std::make_unique<RelayPair>();
  p->name = socket_peer_name(fd);
  p->down.fd = fd;
  const long uid = loopback_socket_uid(p->name, socket_local_endpoint(fd));
  if (uid != static_cast<long>(::getuid())) {
    relay_line(p->name, uid < 0 ? "refused: its socket is not a local one (/proc/net/tcp)"
                                : cat("refused: its socket belongs to uid ", uid, ", not to the job's uid ",
                                      ::getuid()));
    ::close(fd);
    return;
  }
  try {
    p->up.fd = connect_with_retry(opts_.upstream_host, opts_.upstream_port, Clock::now() + opts_.connect_timeout,
                                  std::chrono::milliseconds(100));
  } catch (const ConnectError& e) {
    relay_line(p->name, cat("cannot reach the store at ", opts_.upstream_host, ":", opts_.upstream_port, ": ",
                            e.reason()));
    ::close(fd);
    return;
  }
  put_hello(p->up.out, opts_);
  pairs_.push_back(std::move(p));
}

void StoreRelay::read_side(RelayPair& p, RelaySide& from, RelaySide& to, bool upstream) {
  std::string got;
  const int rc = recv_some(from.fd, got);
  if (rc == -1) return;
  if (rc <= 0) {
    if (upstream && !p.accepted) relay_line(p.name, "the store refused this node's token (see the store's line)");
    from.eof = true;
    return;
  }
  if (upstream && !p.accepted) {
    if (static_cast<uint8_t>(got[0]) != kHelloAccepted) {
      relay_line(p.name, "the store answered HELLO with garbage");
      from.eof = to.eof = true;
      return;
    }
    p.accepted = true;
    got.erase(0, 1);
  }
  to.out += got;
}

void StoreRelay::close_pair(RelayPair& p) {
  for (RelaySide* s : {&p.down, &p.up})
    if (s->fd != -1) ::close(s->fd), s->fd = -1;
}

void StoreRelay::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign(1, pollfd{opts_.listen_fd, POLLIN, 0});
    for (auto& p : pairs_) {
      // Read a side only while the other has room. The worker's bytes follow our HELLO at once: the store
      // reads them in order, and closes the connection instead if it refuses the HELLO.
      const bool read_down = !p->down.eof && p->up.pending() < kRelayHighWater;
      const bool read_up = !p->up.eof && p->down.pending() < kRelayHighWater;
      fds.push_back(pollfd{p->down.fd, static_cast<short>((read_down ? POLLIN : 0) |
                                                          (p->down.pending() ? POLLOUT : 0)), 0});
      fds.push_back(pollfd{p->up.fd, static_cast<short>((read_up ? POLLIN : 0) |
                                                        (p->up.pending() ? POLLOUT : 0)), 0});
    }
    int n = ::poll(fds.data(), fds.size(), 1000);
    if (n == -1 && errno != EINTR) throw Error(cat("meshrun-store: relay: poll: ", std::strerror(errno)));
    if (n > 0 && (fds[0].revents & POLLIN))
      for (int fd; (fd = accept_nonblocking(opts_.listen_fd)) != -1;) accept_one(fd);
    for (size_t i = 0; n > 0 && 1 + 2 * i < fds.size(); ++i) {
      RelayPair& p = *pairs_[i];
      if (fds[1 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) read_side(p, p.down, p.up, false);
      if (fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) read_side(p, p.up, p.down, true);
    }
    for (auto& p : pairs_) {
      // A side that is gone ends the pair once what it sent has reached the other side.
      if (!send_pending(p->up.fd, p->up.out, p->up.out_off)) p->up.eof = p->down.eof = true, p->up.out.clear();
      if (!send_pending(p->down.fd, p->down.out, p->down.out_off)) p->down.eof = p->up.eof = true, p->down.out.clear();
      if ((p->down.eof && p->up.pending() == 0) || (p->up.eof && p->down.pending() == 0)) close_pair(*p);
    }
    std::erase_if(pairs_, [](const auto& p) { return p->down.fd == -1; });
  }
}

}  // namespace

long loopback_socket_uid(const std::string& peer, const std::string& local) {
  const std::vector<std::string> want = proc_net_addresses(peer), toward = proc_net_addresses(local);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream ss(line);
      std::string slot, local_col, remote, state, queues, timer, retr;
      long uid = -1;
      if (!(ss >> slot >> local_col >> remote >> state >> queues >> timer >> retr >> uid)) continue;
      const auto listed = [](const std::vector<std::string>& forms, const std::string& a) {
        return std::find(forms.begin(), forms.end(), a) != forms.end();
      };
      constexpr const char* kEstablished = "01";  // a TIME_WAIT entry (06) is a closed connection's
      if (state == kEstablished && listed(want, local_col) && listed(toward, remote)) return uid;
    }
  }
  return -1;
}

void relay_store(const StoreRelayOptions& opts) {
  set_nonblocking(opts.listen_fd);  // accept until none is pending, never wait in accept
  ::signal(SIGPIPE, SIG_IGN);
  StoreRelay(opts).run();
}

}  // namespace meshtrain::launch
