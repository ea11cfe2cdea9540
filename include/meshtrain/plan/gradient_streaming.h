// Whether optimizer offload (optimizer.offload: cpu) streams the gradients to the host during the backward at
// a given accumulation: the one rule make_optimizer (train/optimizer.h) follows and the planner
// (plan/rank_state.h) counts memory by.
//
// Streamed with accumulation, every micro-batch's gradient is summed into the host's fp32 buffer: about 12 bytes
// a parameter through host memory per micro-batch, for the parameters this rank holds gradients of. A whole
// model per process (single process, DDP) measured far slower than the device (Llama 3.2 3B at 32 micro-batches
// of 2048 tokens on an H200: over 0.6 s of host work per 0.1 s micro-batch), so it streams only without
// accumulation. FSDP moves its 1/N shard per micro-batch while each rank still computes the whole model on its
// own tokens: host time over compute time falls by N (Llama 3.1 70B, FSDP 8, 1 × 4096 tokens: about 0.3,
// hidden behind the backward; docs/offload.md has the arithmetic), so a sharded layout streams at any
// accumulation.
#pragma once

#include <cstdint>

namespace meshtrain::plan {

// `gradient_shards`: ranks each gradient is split over (FSDP's shard group; 1 for whole gradients).
inline bool streams_gradients(int64_t gradient_shards, int64_t grad_accum) {
  return grad_accum == 1 || gradient_shards > 1;
}

}  // namespace meshtrain::plan
