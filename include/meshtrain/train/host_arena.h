// HostArena: fp32 host tensors of known sizes carved from a few large allocations, pinned when asked. The
// caching host allocator rounds every pinned allocation up to a power of two, which would cost the offloaded
// optimizer up to 2× its state (3072 × 3072 fp32: 38 MB → 64 MiB); carved from 1 GiB chunks, the waste is the
// tail of each chunk. A tensor larger than a chunk gets an allocation of its own.
//
//   HostArena arena(/*pinned=*/true, {{4096, 14336}, {4096}, ...});   // every size up front
//   at::Tensor t = arena.take(0);                                     // the tensor of size 0, uninitialised
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace meshtrain::train {

class HostArena {
 public:
  HostArena(bool pinned, const std::vector<std::vector<int64_t>>& sizes, int64_t chunk_bytes = int64_t{1} << 30);

  // The i-th tensor of the constructor's list: contiguous fp32, 64-byte aligned, shares the arena's storage.
  const at::Tensor& take(size_t i) const { return tensors_.at(i); }
  // Bytes allocated (≥ the tensors' bytes).
  int64_t reserved_bytes() const { return reserved_; }

 private:
  std::vector<at::Tensor> tensors_;
  int64_t reserved_ = 0;
};

}  // namespace meshtrain::train
