// Ring reduce-scatter / all-gather / all-reduce and the chain broadcast; see ring.h.
#include "comm/cpu/ring.h"

#include <algorithm>
#include <vector>

#include "comm/reduce_kernels.h"

namespace meshtrain::comm::ring {

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Reduce what has arrived in steps of this many bytes: big enough to amortise the call, small enough that
// reducing overlaps with the rest of the chunk still in flight.
constexpr std::size_t kReduceSegment = std::size_t(256) << 10;

}  // namespace

Chunk chunk(std::size_t numel, int parts, int c) {
  const std::size_t p = static_cast<std::size_t>(parts);
  const std::size_t base = numel / p;
  const std::size_t rem = numel % p;
  const std::size_t uc = static_cast<std::size_t>(c);
  return Chunk{uc * base + std::min(uc, rem), base + (uc < rem ? 1 : 0)};
}

void reduce_scatter(const PeerLinks& links, void* work, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                    const OpContext& ctx) {
  const int n = links.size;
  if (n == 1 || numel == 0) return;
  const int r = links.rank;
  const int left = mod(r - 1, n);
  const int right = mod(r + 1, n);
  const std::size_t es = dtype_size(dtype);
  char* base = static_cast<char*>(work);
  char* scratch = links.scratch.get(0, chunk(numel, n, 0).count * es);  // chunk 0 is the largest
  for (int s = 0; s < n - 1; ++s) {
    const Chunk sc = chunk(numel, n, mod(r - s - 1, n));
    const Chunk rc = chunk(numel, n, mod(r - s - 2, n));
    char* dst = base + rc.begin * es;
    std::size_t reduced = 0;  // elements of rc already folded into dst
    Transfer ts[2] = {Transfer::send(right, links.to(right), base + sc.begin * es, sc.count * es),
                      Transfer::recv(left, links.to(left), scratch, rc.count * es)};
    ts[1].on_progress = [&](std::size_t got) {
      const std::size_t avail = got / es;
      if (avail - reduced < kReduceSegment / es && avail != rc.count) return;
      reduce_into(dst + reduced * es, scratch + reduced * es, avail - reduced, dtype, op);
      reduced = avail;
    };
    run_transfers(ts, ctx);
    if (reduced < rc.count) reduce_into(dst + reduced * es, scratch + reduced * es, rc.count - reduced, dtype, op);
  }
}

void all_gather(const PeerLinks& links, void* buf, std::size_t numel, std::size_t es, const OpContext& ctx) {
  const int n = links.size;
  if (n == 1 || numel == 0) return;
  const int r = links.rank;
  const int left = mod(r - 1, n);
  const int right = mod(r + 1, n);
  char* base = static_cast<char*>(buf);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk sc = chunk(numel, n, mod(r - s, n));
    const Chunk rc = chunk(numel, n, mod(r - s - 1, n));
    Transfer ts[2] = {Transfer::send(right, links.to(right), base + sc.begin * es, sc.count * es),
                      Transfer::recv(left, links.to(left), base + rc.begin * es, rc.count * es)};
    run_transfers(ts, ctx);
  }
}

void all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                const OpContext& ctx) {
  reduce_scatter(links, buf, numel, dtype, op, ctx);
  if (op == ReduceOp::Avg) {
    const Chunk mine = chunk(numel, links.size, links.rank);
    divide_by(static_cast<char*>(buf) + mine.begin * dtype_size(dtype), mine.count, dtype, links.size);
  }
  all_gather(links, buf, numel, dtype_size(dtype), ctx);
}

void broadcast(const PeerLinks& links, void* buf, std::size_t nbytes, int root, const OpContext& ctx) {
  const int n = links.size;
  if (n == 1 || nbytes == 0) return;
  const int pos = mod(links.rank - root, n);  // position along the chain that starts at root
  const int left = mod(links.rank - 1, n);
  const int right = mod(links.rank + 1, n);
  std::size_t have = pos == 0 ? nbytes : 0;  // bytes of buf valid here, i.e. forwardable
  std::vector<Transfer> ts;
  if (pos > 0) {
    ts.push_back(Transfer::recv(left, links.to(left), buf, nbytes));
    ts.back().on_progress = [&have](std::size_t got) { have = got; };
  }
  if (pos < n - 1) {
    ts.push_back(Transfer::send(right, links.to(right), buf, nbytes));
    ts.back().limit = &have;
  }
  run_transfers(ts, ctx);
}

}  // namespace meshtrain::comm::ring
