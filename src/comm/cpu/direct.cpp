// All-pairs algorithms; see direct.h.
#include "comm/cpu/direct.h"

#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"

namespace meshtrain::comm::direct {

void all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                const OpContext& ctx) {
  const int n = links.size;
  const std::size_t nbytes = numel * dtype_size(dtype);
  if (numel == 0) return;
  char* scratch = links.scratch.get(0, nbytes * static_cast<std::size_t>(n));
  std::vector<const void*> srcs(static_cast<std::size_t>(n));
  std::vector<Transfer> ts;
  for (int p = 0; p < n; ++p) {
    if (p == links.rank) {
      srcs[p] = buf;
      continue;
    }
    char* slot = scratch + nbytes * static_cast<std::size_t>(p);
    srcs[p] = slot;
    ts.push_back(Transfer::send(p, links.to(p), buf, nbytes));
    ts.push_back(Transfer::recv(p, links.to(p), slot, nbytes));
  }
  run_transfers(ts, ctx);
  reduce_many(buf, srcs.data(), n, numel, dtype, op);
}

void broadcast(const PeerLinks& links, void* buf, std::size_t nbytes, int root, const OpContext& ctx) {
  if (links.size == 1 || nbytes == 0) return;
  std::vector<Transfer> ts;
  if (links.rank == root) {
    for (int p = 0; p < links.size; ++p) {
      if (p != root) ts.push_back(Transfer::send(p, links.to(p), buf, nbytes));
    }
  } else {
    ts.push_back(Transfer::recv(root, links.to(root), buf, nbytes));
  }
  run_transfers(ts, ctx);
}

void all_to_all(const PeerLinks& links, void* out, const void* in, std::size_t chunk_bytes, const OpContext& ctx) {
  const std::size_t r = static_cast<std::size_t>(links.rank);
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  if (chunk_bytes == 0) return;
  std::memcpy(o + r * chunk_bytes, i + r * chunk_bytes, chunk_bytes);
  std::vector<Transfer> ts;
  for (int p = 0; p < links.size; ++p) {
    if (p == links.rank) continue;
    const std::size_t up = static_cast<std::size_t>(p);
    ts.push_back(Transfer::send(p, links.to(p), i + up * chunk_bytes, chunk_bytes));
    ts.push_back(Transfer::recv(p, links.to(p), o + up * chunk_bytes, chunk_bytes));
  }
  run_transfers(ts, ctx);
}

void barrier(const PeerLinks& links, const OpContext& ctx) {
  const int n = links.size;
  if (n == 1) return;
  const char token = 'b';
  std::vector<char> got(static_cast<std::size_t>(n));
  std::vector<Transfer> ts;
  for (int p = 0; p < n; ++p) {
    if (p == links.rank) continue;
    ts.push_back(Transfer::send(p, links.to(p), &token, 1));
    ts.push_back(Transfer::recv(p, links.to(p), &got[static_cast<std::size_t>(p)], 1));
  }
  run_transfers(ts, ctx);
}

}  // namespace meshtrain::comm::direct
