// Between blocks (core/sharded_tensor.h) and whole tensors: the block of a whole tensor a shard holds, and
// the whole tensor assembled from every rank's blocks. Used by tests (compare any layout with the
// single-process run) and by the trainer's whole-tensor checkpoints until they are saved sharded.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::parallel {

// The view of `full` (global shape) at s's offsets with s.local's shape.
at::Tensor block_of(const at::Tensor& full, const ShardedTensor& s);

// The whole tensor, on every rank: each writing rank places its block in zeros and `world` sums them (exact:
// every element has one writer). Collective over `world`: every rank calls it, in the same order. A null
// `world` (replicated layouts, where every block is whole) returns s.local.
at::Tensor assemble_full(const ShardedTensor& s, comm::Communicator* world);

}  // namespace meshtrain::parallel
