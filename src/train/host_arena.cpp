#include "meshtrain/train/host_arena.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace meshtrain::train {
namespace {

constexpr int64_t kAlign = 64;  // elements of 4 bytes: 256-byte alignment, whole cache lines and vectors

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t padded(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

HostArena::HostArena(bool pinned, const std::vector<std::vector<int64_t>>& sizes, int64_t chunk_bytes) {
  const auto opts = at::TensorOptions(at::kFloat).pinned_memory(pinned);
  const int64_t chunk_elems = chunk_bytes / 4;
  int64_t rest = 0;  // elements still to place, padded
  for (const auto& s : sizes) rest += padded(numel_of(s));
  at::Tensor chunk;
  int64_t used = 0;
  for (const auto& s : sizes) {
    const int64_t n = numel_of(s), take = padded(n);
    if (take > chunk_elems) {  // its own allocation
      tensors_.push_back(at::empty(s, opts));
      reserved_ += n * 4;
      rest -= take;
      continue;
    }
    if (!chunk.defined() || used + take > chunk.numel()) {
      // The last chunk only as large as what is left (a power of two: what the allocator gives anyway).
      const int64_t elems = std::min(chunk_elems, std::max(take, pow2_ceil(rest * 4) / 4));
      chunk = at::empty({elems}, opts);
      reserved_ += elems * 4;
      used = 0;
    }
    tensors_.push_back(chunk.narrow(0, used, n).view(s));
    used += take;
    rest -= take;
  }
}

}  // namespace meshtrain::train
