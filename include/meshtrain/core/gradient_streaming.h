// How optimizer offload (optimizer.offload: cpu) moves the gradients to the host: streamed during the backward,
// held on the device until the step, or downloaded whole. The one rule that make_optimizer (train/optimizer.h)
// follows, the planner (plan/rank_state.h) counts memory by and the device check (core/model_size.h) leaves the
// gradients off the device by. In core so that all
// three reach it: core cannot include plan.
//
// Which layouts can stream: the replicated one (single process, DDP) and FSDP/HSDP, whose gradients leave as
// the backward makes them (ReplicatedModel / FullyShard::stream_gradients); not ZeRO-1/2 or an aliased shard
// group of one (their fp32 gradient shards are the optimizer's), not under tensor parallelism or a pipeline.
//
// At which accumulation: streamed with accumulation, every micro-batch's gradient is summed into the host's
// fp32 buffer: about 12 bytes a parameter through host memory per micro-batch, for the parameters this rank
// holds gradients of. A whole model per process (single process, DDP) measured far slower than the device
// (Llama 3.2 3B at 32 micro-batches of 2048 tokens on an H200: over 0.6 s of host work per 0.1 s micro-batch),
// so it streams only without accumulation; with accumulation it holds the gradients on the device instead.
// FSDP moves its 1/N shard per micro-batch while each rank still computes the whole model on its own tokens:
// host time over compute time falls by N (Llama 3.1 70B, FSDP 8, 1 × 4096 tokens: about 0.3, hidden behind the
// backward; docs/offload.md has the arithmetic), so a sharded layout streams at any accumulation.
#pragma once

#include <cstdint>

namespace meshtrain {

// The accumulation rule. `gradient_shards`: ranks each gradient is split over (FSDP's shard group; 1 for whole
// gradients).
inline bool streams_gradients(int64_t gradient_shards, int64_t grad_accum) {
  return grad_accum == 1 || gradient_shards > 1;
}

// What of a layout the whole rule reads.
struct GradientLayout {
  int zero_stage = 0;           // effective: 3 under FSDP/HSDP (fsdp > 1 with zero_stage 0)
  bool aliased = false;         // a shard group of one whose module parameters are the fp32 master shards
  int64_t tp = 1, pp = 1;
  int64_t gradient_shards = 1;  // as for streams_gradients
};

// The whole rule, for a run with optimizer offload: a layout that can stream, at an accumulation it streams at.
inline bool offload_streams_gradients(const GradientLayout& l, int64_t grad_accum) {
  const bool can = (l.zero_stage == 0 || (l.zero_stage == 3 && !l.aliased)) && l.tp == 1 && l.pp == 1;
  return can && streams_gradients(l.gradient_shards, grad_accum);
}

// Held: a whole-model layout (single process, DDP) that does not stream keeps its trainable parameters and its
// gradients in the compute dtype on the device (the micro-batches accumulate there, in that dtype), and the
// optimizer takes each gradient down in chunks at the step through a few pinned slots (train/chunked_update.h):
// host memory is the fp32 master and two moments, 12 bytes a parameter, not 16. Not with the delayed update
// (optimizer.offload_delay), which updates from a whole step's gradients on the host while the device runs the
// next step's backward into its own: that keeps the downloaded way (fp32 parameters and gradients on the
// device, 16 bytes a parameter on the host).
inline bool offload_holds_gradients(const GradientLayout& l, int64_t grad_accum, bool delayed) {
  return l.zero_stage == 0 && l.tp == 1 && l.pp == 1 && !delayed && !offload_streams_gradients(l, grad_accum);
}

// The pinned slots of the held way: kHeldSlots of them, each a gradient chunk and the cast of its new
// parameter, kHeldChunkElements values of at most 4 bytes each.
constexpr int kHeldSlots = 8;
constexpr int64_t kHeldChunkElements = int64_t{1} << 22;
constexpr int64_t kHeldSlotBytes = int64_t{kHeldSlots} * 2 * 4 * kHeldChunkElements;

}  // namespace meshtrain
