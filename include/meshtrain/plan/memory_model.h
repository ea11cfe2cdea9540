// MemoryModel: one GPU's peak memory for a training step, itemised. It walks the step as the trainer runs it
// (parallel/parallel_model.h): the forward of a micro-batch, the head's backward, each block's backward from the
// last, the end of backward; at each point it sums what is alive, and the largest sum is the predicted peak of
// the caching allocator (`peak_memory_bytes` in the metrics). On top of that peak come what the allocator
// cannot hand out (its slack) and what lives outside it (CUDA context, NCCL buffers): the device total.
//
// What is alive at a point: the rank's state (rank_state.h), the bf16 copies autocast makes of fp32 weights (a
// linear keeps its copy for backward), FSDP's gathered units (this block and the prefetched next one), the
// saved activations (activation_model.h) of the blocks not yet back-propagated, the head and loss, the
// gradients made so far (where they are not a persistent buffer), communication buffers, and the transient of
// the op running there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/activation_model.h"
#include "meshtrain/plan/gpu_spec.h"
#include "meshtrain/plan/rank_state.h"

namespace meshtrain::plan {

struct MemoryItems {
  int64_t params = 0;        // module parameters (replicated: fp32, the master copy; ZeRO-1/2: gathered copy)
  int64_t master = 0;        // fp32 master shards
  int64_t frozen = 0;        // frozen parameters' shards (LoRA's base: compute dtype)
  int64_t grads = 0;         // gradients alive at the peak (buffers, shards, or made so far by backward)
  int64_t optimizer = 0;     // AdamW state
  int64_t gathered = 0;      // FSDP units gathered at the peak (the running block, the prefetched one, the root)
  int64_t weight_copies = 0; // bf16 copies of fp32 weights made by autocast and kept for backward
  int64_t activations = 0;   // saved activations of the blocks (and the recomputed block under checkpointing)
  int64_t loss = 0;          // head: norm input, logits / loss state, and their gradients at the peak
  int64_t comm_buffers = 0;  // reduce-scatter / all-gather staging, bf16 reduction copies
  int64_t transient = 0;     // temporaries of the op at the peak (a block's backward) and the token ids

  int64_t sum() const;
};

struct MemoryEstimate {
  MemoryItems peak;              // what is alive at the predicted peak
  std::string peak_at;           // "head backward", "block 3 backward", "end of backward"
  int64_t peak_allocated = 0;    // = peak.sum(): compare with the measured peak_memory_bytes
  int64_t allocator_slack = 0;   // the caching allocator's reserve beyond allocated (5 % of the peak)
  int64_t context = 0;           // CUDA context, kernels, library workspaces (outside the allocator)
  int64_t nccl = 0;              // NCCL's own buffers per communicator (outside the allocator)
  int64_t device_total = 0;      // peak_allocated + slack + context + nccl
  int64_t device_memory = 0;     // the GPU's memory
  bool fits = false;
  ActivationBytes activation;    // per block with and without checkpointing, the head: for the report
  RankState state;               // the worst rank's state
  // optimizer.offload: cpu: host bytes of the offloaded optimizer (fp32 master copy, AdamW moments, the
  // gradients' host buffers: 16 bytes per optimized element; held on the device: 12 and the pinned slots);
  // the moments are then not in `peak`.
  int64_t host_optimizer = 0;
  // checkpoint.memory_every (unless 0): the bytes of one in-memory checkpoint of this rank (train/memory_checkpoints.h
  // keeps snapshot_copies(nodes) of them in host memory), taken as 12 bytes per trained element (fp32 weight +
  // AdamW's moments: 1.5 × the optimizer's bytes; frozen weights a full snapshot would also hold are not counted).
  int64_t host_snapshots = 0;
};

// `cfg` resolved for `world_size` ranks; `cuda` false plans an fp32 CPU run (no autocast, no fused kernels).
// How many copies of a rank's snapshot its node's memory holds: 2 own, the staging buffers, and (more than one
// node) 2 replicas of a peer's.
inline int64_t snapshot_copies(int64_t nodes) { return nodes > 1 ? 5 : 3; }

MemoryEstimate estimate_memory(const Config& cfg, int64_t world_size, const GpuSpec& gpu, bool cuda = true);

}  // namespace meshtrain::plan
