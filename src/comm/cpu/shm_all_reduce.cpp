// Shared-memory all-reduce for same-host communicators; see shm_all_reduce.h.
#include "comm/cpu/shm_all_reduce.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/cpu/direct.h"
#include "comm/cpu/ring.h"
#include "comm/reduce_kernels.h"

namespace meshtrain::comm {

namespace {

// RAII for a descriptor received or created here.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
};

void wait_fd(int fd, short events, const OpContext& ctx, int peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int left = ms_until(ctx.deadline);
    if (left == 0) {
      throw CommTimeoutError(cat(ctx.describe(), ": timed out after ", ctx.timeout.count(),
                                 " ms exchanging shared-memory areas with rank ", peer));
    }
    const int rc = ::poll(&p, 1, left);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw Error(cat(ctx.describe(), ": poll failed: ", std::strerror(errno)));
  }
}

// One byte carrying `fd` as SCM_RIGHTS. The op streams are in step, so this byte is the next one the peer reads.
void send_fd(const Socket& s, int fd, const OpContext& ctx, int peer) {
  char byte = 'm';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    const ssize_t k = ::sendmsg(s.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k == 1) return;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_fd(s.fd(), POLLOUT, ctx, peer);
      continue;
    }
    throw Error(cat(ctx.describe(), ": passing the shared-memory area to rank ", peer, " failed: ", std::strerror(errno)));
  }
}

Fd recv_fd(const Socket& s, const OpContext& ctx, int peer) {
  for (;;) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t k = ::recvmsg(s.fd(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (k == 1) {
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      MT_CHECK(byte == 'm' && c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS, ctx.describe(),
               ": rank ", peer, " sent no shared-memory descriptor (ops out of step?)");
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
      return Fd(fd);
    }
    if (k == 0) throw Error(cat(ctx.describe(), ": rank ", peer, " closed its connection (that rank exited or failed)"));
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_fd(s.fd(), POLLIN, ctx, peer);
      continue;
    }
    throw Error(cat(ctx.describe(), ": receiving rank ", peer, "'s shared-memory area failed: ", std::strerror(errno)));
  }
}

char* map_area(int fd, std::size_t bytes, const OpContext& ctx) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw Error(cat(ctx.describe(), ": mmap of a shared-memory area failed: ", std::strerror(errno)));
  return static_cast<char*>(p);
}

}  // namespace

std::unique_ptr<ShmArena> ShmArena::create(const PeerLinks& links, const OpContext& ctx, std::size_t segment_bytes) {
  MT_CHECK(segment_bytes >= 4096 && segment_bytes % 64 == 0, "shared-memory segment of ", segment_bytes, " bytes");
  std::unique_ptr<ShmArena> a(new ShmArena());
  a->segment_ = segment_bytes;
  const std::size_t arena_bytes = segment_bytes * kSlots;
  a->maps_.assign(static_cast<std::size_t>(links.size), nullptr);
  Fd mine(::memfd_create("meshtrain-cpu-comm", MFD_CLOEXEC));
  if (mine.fd < 0 || ::ftruncate(mine.fd, static_cast<off_t>(arena_bytes)) != 0) {
    throw Error(cat(ctx.describe(), ": cannot create a shared-memory area: ", std::strerror(errno)));
  }
  a->maps_[static_cast<std::size_t>(links.rank)] = map_area(mine.fd, arena_bytes, ctx);
  // Send to everyone first (one byte each always fits an idle socket), then receive: no ordering deadlock.
  for (int p = 0; p < links.size; ++p) {
    if (p != links.rank) send_fd(links.to(p), mine.fd, ctx, p);
  }
  for (int p = 0; p < links.size; ++p) {
    if (p == links.rank) continue;
    Fd theirs = recv_fd(links.to(p), ctx, p);
    a->maps_[static_cast<std::size_t>(p)] = map_area(theirs.fd, arena_bytes, ctx);
  }
  return a;
}

ShmArena::~ShmArena() {
  for (char* m : maps_) {
    if (m) ::munmap(m, segment_ * kSlots);
  }
}

void ShmArena::all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                          const OpContext& ctx) {
  const int n = links.size;
  const int r = links.rank;
  const std::size_t es = dtype_size(dtype);
  if (numel == 0) return;
  const std::size_t seg_elems = segment_ / es;
  const std::size_t nseg = (numel + seg_elems - 1) / seg_elems;
  char* out = static_cast<char*>(buf);
  // Slots keep rotating across ops: the next op's first copy_in must not hit the slot a slower rank may still
  // be copying out of (every rank runs the same ops on this arena, so they agree on first_).
  const std::uint64_t first = first_;
  first_ += nseg;
  auto slot_of = [first](std::size_t k) { return static_cast<int>((first + k) % kSlots); };
  auto seg_count = [&](std::size_t k) { return std::min(seg_elems, numel - k * seg_elems); };
  auto copy_in = [&](std::size_t k) {
    std::memcpy(slot(r, slot_of(k)), out + k * seg_elems * es, seg_count(k) * es);
  };
  std::vector<const void*> srcs(static_cast<std::size_t>(n));
  auto reduce = [&](std::size_t k) {
    const ring::Chunk c = ring::chunk(seg_count(k), n, r);
    if (c.count == 0) return;
    for (int p = 0; p < n; ++p) srcs[static_cast<std::size_t>(p)] = slot(p, slot_of(k)) + c.begin * es;
    reduce_many(slot(r, slot_of(k)) + c.begin * es, srcs.data(), n, c.count, dtype, op);
  };
  auto copy_out = [&](std::size_t k) {
    const std::size_t m = seg_count(k);
    for (int p = 0; p < n; ++p) {
      const ring::Chunk c = ring::chunk(m, n, p);
      std::memcpy(out + (k * seg_elems + c.begin) * es, slot(p, slot_of(k)) + c.begin * es,
                  c.count * es);
    }
  };
  copy_in(0);
  for (std::size_t t = 0; t <= nseg; ++t) {
    direct::barrier(links, ctx);
    if (t >= 1) copy_out(t - 1);
    if (t < nseg) reduce(t);
    if (t + 1 < nseg) copy_in(t + 1);
  }
}

}  // namespace meshtrain::comm
