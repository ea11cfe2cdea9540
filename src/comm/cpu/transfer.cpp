// The poll() loop behind every CPU op; see transfer.h.
#include "comm/cpu/transfer.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace meshtrain::comm {

std::string OpContext::describe() const {
  return cat(op, " seq ", seq, " in group '", group, "' (rank ", rank, " of ", size, ")");
}

char* Scratch::get(int slot, std::size_t n) {
  if (cap_[slot] < n) {
    buf_[slot].reset(new char[n]);  // uninitialised on purpose
    cap_[slot] = n;
  }
  return buf_[slot].get();
}

Transfer Transfer::send(int peer, const Socket& s, const void* buf, std::size_t len) {
  Transfer t;
  t.peer = peer;
  t.fd = s.fd();
  t.is_send = true;
  t.buf = static_cast<char*>(const_cast<void*>(buf));  // never written through
  t.len = len;
  return t;
}

Transfer Transfer::recv(int peer, const Socket& s, void* buf, std::size_t len) {
  Transfer t;
  t.peer = peer;
  t.fd = s.fd();
  t.is_send = false;
  t.buf = static_cast<char*>(buf);
  t.len = len;
  return t;
}

namespace {

// Reads and writes beyond a few MiB per call only starve the other direction.
constexpr std::size_t kMaxIo = std::size_t(4) << 20;

std::size_t send_limit(const Transfer& t) { return t.limit ? std::min(t.len, *t.limit) : t.len; }

// Moves as many bytes as the socket takes without blocking. Returns true if any moved.
bool pump(Transfer& t, const OpContext& ctx) {
  bool moved = false;
  while (t.done < t.len) {
    if (t.is_send) {
      const std::size_t lim = send_limit(t);
      if (t.done >= lim) break;
      ssize_t k = ::send(t.fd, t.buf + t.done, std::min(lim - t.done, kMaxIo), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        t.done += static_cast<std::size_t>(k);
        moved = true;
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      throw Error(cat(ctx.describe(), ": sending to rank ", t.peer, " failed after ", t.done, " of ", t.len,
                      " bytes: ", std::strerror(errno), errno == EPIPE || errno == ECONNRESET
                                                          ? " (that rank exited or closed its communicator?)"
                                                          : ""));
    } else {
      ssize_t k = ::recv(t.fd, t.buf + t.done, std::min(t.len - t.done, kMaxIo), MSG_DONTWAIT);
      if (k > 0) {
        t.done += static_cast<std::size_t>(k);
        moved = true;
        if (t.on_progress) t.on_progress(t.done);
        continue;
      }
      if (k == 0) {
        throw Error(cat(ctx.describe(), ": rank ", t.peer, " closed its connection after ", t.done, " of ", t.len,
                        " bytes (that rank exited or failed; see its log)"));
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      throw Error(cat(ctx.describe(), ": receiving from rank ", t.peer, " failed after ", t.done, " of ", t.len,
                      " bytes: ", std::strerror(errno)));
    }
  }
  return moved;
}

[[noreturn]] void throw_timeout(std::span<Transfer> ts, const OpContext& ctx) {
  std::vector<int> missing;
  std::string detail;
  for (const Transfer& t : ts) {
    if (t.done >= t.len) continue;
    if (t.is_send && t.done >= send_limit(t)) continue;  // blocked on our own receive, not on this peer
    if (std::find(missing.begin(), missing.end(), t.peer) == missing.end()) missing.push_back(t.peer);
    detail += cat("; rank ", t.peer, t.is_send ? ": sent " : ": received ", t.done, " of ", t.len, " bytes");
  }
  std::string ranks;
  for (std::size_t i = 0; i < missing.size(); ++i) ranks += cat(i ? ", " : "", missing[i]);
  throw CommTimeoutError(cat(ctx.describe(), ": timed out after ", ctx.timeout.count(),
                             " ms waiting for rank(s) ", ranks.empty() ? "?" : ranks,
                             " (did a rank skip this op, issue ops in a different order, or hang?)", detail));
}

}  // namespace

void run_transfers(std::span<Transfer> ts, const OpContext& ctx) {
  std::vector<pollfd> pfds;
  std::vector<Transfer*> polled;
  for (;;) {
    bool all_done = true;
    bool moved = false;
    for (Transfer& t : ts) {
      moved |= pump(t, ctx);
      all_done &= t.done >= t.len;
    }
    if (all_done) return;
    if (moved) continue;  // a forward limit may have been raised: pump again before sleeping
    pfds.clear();
    polled.clear();
    for (Transfer& t : ts) {
      if (t.done >= t.len) continue;
      if (t.is_send && t.done >= send_limit(t)) continue;
      pfds.push_back(pollfd{t.fd, static_cast<short>(t.is_send ? POLLOUT : POLLIN), 0});
      polled.push_back(&t);
    }
    const int left = ms_until(ctx.deadline);
    if (left == 0) throw_timeout(ts, ctx);
    int rc = ::poll(pfds.data(), pfds.size(), left);
    if (rc < 0 && errno != EINTR) throw Error(cat(ctx.describe(), ": poll failed: ", std::strerror(errno)));
    if (rc == 0 && ms_until(ctx.deadline) == 0) throw_timeout(ts, ctx);
    // POLLERR/POLLHUP surface as errors from the next send()/recv() in pump().
  }
}

}  // namespace meshtrain::comm
