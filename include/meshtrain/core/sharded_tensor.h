// ShardedTensor: the piece of one global tensor that this rank holds — the common currency between the
// parallel layers (which decide who holds what) and checkpoints (which save any layout and load it into any
// other). Header-only; the parallel room produces these, the ckpt room reads and writes them.
//
// Every layout meshtrain uses is a rectangular block of the global tensor:
//   replicated (DDP)         offsets all 0, local shape = global shape (only one replica needs saving)
//   FSDP / ZeRO              dim-0 chunk: rows [r·ceil(n/W), min(n, (r+1)·ceil(n/W))) — possibly 0 rows
//   tensor parallel          a column or row block (dim 0 or 1) of a Linear's weight, a vocab block of the
//                            embedding; FSDP × TP is a dim-0 chunk of the TP block (still a rectangle)
// So a shard is (global shape, offsets, local shape), and resharding is intersecting rectangles.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

// "[4096, 512]": a shape as messages print it.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

struct ShardedTensor {
  // Global name, the same under every layout: the model's parameter name ("blocks.3.attn.wq.weight"), with
  // a prefix for optimizer state ("optim.exp_avg.blocks.3.attn.wq.weight").
  std::string name;
  std::vector<int64_t> global_shape;
  // Where `local` starts inside the global tensor, one entry per dim (size = global_shape.size()).
  std::vector<int64_t> offsets;
  // This rank's block: shape[d] <= global_shape[d] - offsets[d]. May have 0 elements (an empty FSDP chunk).
  // On save it is read; on load it is written in place (so it must be the live storage, e.g. a view of a
  // flat shard buffer or the parameter itself).
  at::Tensor local;
  // Replicated copies of the same block exist on other ranks; exactly one rank of each replica set sets
  // `write` so a checkpoint stores each block once (e.g. dp rank 0 under DDP). Loading fills every copy.
  bool write = true;
};

}  // namespace meshtrain
