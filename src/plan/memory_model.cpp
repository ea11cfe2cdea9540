// The step walk of memory_model.h.
#include "meshtrain/plan/memory_model.h"

#include <algorithm>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {

int64_t MemoryItems::sum() const {
  return params + master + frozen + grads + optimizer + gathered + weight_copies + activations + loss + comm_buffers +
         transient;
}

namespace {

// Element counts of one block and of the root (this tp rank's blocks), and of their matmul operands.
struct Sizes {
  int64_t block = 0, root = 0, root_trainable = 0;
  int64_t block_grad = 0;                 // the most trainable elements of any block: its gradients' size
  int64_t block_gathered = 0, root_gathered = 0;  // bytes of a unit's full parameters while FSDP gathers them
  int64_t block_cast = 0, root_cast = 0;  // matmul operands held in fp32: autocast makes a bf16 copy of each
  int64_t head_grad = 0;                  // the head weight's elements when it trains (LoRA: 0, it is frozen)
  int64_t block_trainable = 0;            // of all blocks together
  bool block_weights_train = false;       // some block's base weight trains (LoRA: only its adapters do)
};

Sizes sizes(const Config& cfg, const RankLayout& l) {
  Sizes s;
  std::vector<int64_t> trainable(static_cast<size_t>(cfg.model.n_layer), 0);
  for (const auto& p : param_table(cfg.model)) {
    int64_t n = 1;
    for (int64_t d : p.tp_shape(0, l.tp)) n *= d;
    const bool train = trains(cfg, p.name);
    // parallelize(): a frozen parameter may be held in the compute dtype already (LoRA's base), then not cast.
    const int64_t cast = p.matmul && (train || l.frozen_bytes == 4) ? n : 0;
    // FSDP gathers a trainable unit in param_dtype, a frozen one in the dtype it is held in (rank_state.cpp).
    const int64_t gathered = (train || l.frozen_bytes == 4 ? l.param_bytes : l.frozen_bytes) * n;
    if (p.block == 0) s.block += n, s.block_cast += cast, s.block_gathered += gathered;
    if (p.block < 0) {
      s.root += n;
      s.root_gathered += gathered;
      s.root_cast += cast;
      s.root_trainable += train ? n : 0;
      if (p.matmul) s.head_grad = train ? n : 0;
    } else {
      s.block_trainable += train ? n : 0;
      trainable[static_cast<size_t>(p.block)] += train ? n : 0;
      s.block_weights_train |= p.matmul && train && cfg.model.lora_rank == 0;
    }
  }
  for (int64_t t : trainable) s.block_grad = std::max(s.block_grad, t);
  return s;
}

struct Walk {
  const MemoryItems base;  // alive throughout: state, inputs
  MemoryItems best;
  std::string at;
  void point(MemoryItems m, const std::string& where) {
    if (at.empty() || m.sum() > best.sum()) best = m, at = where;
  }
};

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, int64_t world_size, const GpuSpec& gpu, bool cuda) {
  const RankLayout l = RankLayout::from(cfg, world_size);
  const RankState st = worst_rank_state(cfg, world_size);
  const Sizes sz = sizes(cfg, l);
  const bool bf16 = compute_dtype(cfg.train, cuda) == Dtype::bf16;
  const bool ac = cfg.train.activation_checkpointing;
  const int64_t L = cfg.model.n_layer / std::max<int64_t>(l.pp, 1), A = cfg.train.grad_accum;
  const int64_t held = held_microbatches(l.pp, 0, A);

  ActivationInputs in{.micro_batch = cfg.train.micro_batch_size, .seq_len = cfg.data.seq_len, .tp = l.tp,
                      .sequence_parallel = cfg.parallel.sequence_parallel, .compute_bytes = bf16 ? 2 : 4,
                      .fused_kernels = cfg.train.fused_kernels && cuda, .checkpointing = ac,
                      .loss_chunk_bytes = cfg.train.loss_chunk_mb << 20, .head_trains = sz.head_grad > 0,
                      .block_weights_train = sz.block_weights_train};
  const ActivationBytes act = activation_bytes(cfg.model, in);

  // Persistent: state (gradients where they are a buffer: DDP buckets, shard gradients) and the token ids.
  const bool grad_buffer = l.reducer || l.zero_stage > 0;
  // Offloaded (optimizer.offload: cpu): the moments live in host memory, beside a master copy and the
  // gradients' host buffers (train/offloaded_adamw.h).
  const bool offload = cfg.optimizer.offload == OptimizerOffload::cpu;
  MemoryItems base{.params = st.params, .master = st.master, .frozen = st.frozen, .grads = grad_buffer ? st.grads : 0,
                   .optimizer = offload ? 0 : st.optimizer, .transient = act.inputs};
  // Plain model with accumulation: the previous micro-batches' gradients are alive during the next forward.
  const int64_t plain_grads = grad_buffer ? 0 : st.grads;
  // bf16 copies autocast makes of fp32 weights: FSDP/ZeRO with bf16 parameters, streamed replicated offload,
  // and a frozen base held in bf16 (LoRA) have none.
  const bool copies = bf16 && (l.zero_stage > 0 ? l.param_bytes == 4 : !l.stream);
  // Streamed offload: the gradient being handed over and its fp32 cast on the copy stream — replicated: the
  // largest is the embedding's or the head's; FSDP: a unit's reduced shard (the one before the unit whose
  // reduce-scatter is running, or the root's at the end), in reduce_dtype, and its fp32 cast when that differs.
  if (l.stream && l.zero_stage == 0) base.transient += (l.stream_bytes + 4) * sz.head_grad;
  if (l.stream && l.zero_stage == 3)
    base.transient += (l.reduce_bytes + (l.reduce_bytes == 4 ? 0 : 4)) * std::max(sz.block_grad, sz.root_trainable) /
                      l.shard;
  const int64_t block_copy = copies ? 2 * sz.block_cast : 0, root_copy = copies ? 2 * sz.root_cast : 0;
  // Full (unsharded) bytes of a unit while gathered under FSDP.
  const bool fsdp = l.zero_stage == 3 && !l.alias;
  const int64_t pb = l.param_bytes, block_full = fsdp ? sz.block_gathered : 0, root_full = fsdp ? sz.root_gathered : 0;
  // ZeRO-1/2: full gradients of a unit (param_dtype) until its reduce-scatter; ZeRO-1 keeps all while accumulating.
  // Only trainable units have gradients (parallel/fsdp/fully_shard.h splits each block by trainable and frozen).
  const bool zero12 = l.zero_stage > 0 && l.zero_stage < 3 && !l.alias;
  const int64_t full_grads_acc = zero12 && l.zero_stage == 1 && A > 1 ? pb * (sz.root_trainable + L * sz.block_grad) : 0;
  // The running unit's reduce-scatter input and output; a group of one writes into the shard gradients (none
  // when streamed: then its input is its output, a transient of the unit's size).
  const int64_t rs_unit = l.zero_stage == 0 || l.alias ? 0
                          : l.shard > 1 ? l.reduce_bytes * (sz.block_grad + sz.block_grad / l.shard)
                          : l.stream    ? l.reduce_bytes * sz.block_grad
                                        : 0;

  Walk w{base, {}, {}};
  const int64_t blocks_held = held * L * act.block_held(ac);
  const int64_t copies_held = ac ? 0 : L * block_copy;
  const int64_t blocks_gathered = fsdp && !cfg.parallel.fsdp_reshard_after_forward ? L * block_full : 0;
  // End of forward + the head's backward.
  {
    MemoryItems m = base;
    m.grads += (A > 1 ? plain_grads : 0) + full_grads_acc;
    m.activations = blocks_held;
    m.weight_copies = copies_held + root_copy;
    m.gathered = root_full + blocks_gathered;
    m.loss = act.head.saved + std::max(act.head.forward_peak, act.head.backward_peak);
    w.point(m, "head backward");
  }
  // Each block's backward, last first: its saved set (recomputed under checkpointing) and its transients.
  for (int64_t i = L - 1; i >= 0; --i) {
    MemoryItems m = base;
    const int64_t done = L - 1 - i;  // blocks already back-propagated
    // Plain model: the head's weight gradient, then each finished block's (all of them when accumulating).
    const int64_t made = A > 1 ? plain_grads
                               : plain_grads > 0 ? 4 * (sz.head_grad + sz.block_trainable / cfg.model.n_layer * done) : 0;
    // ZeRO-1/2 and FSDP: the running block's full gradients until its reduce-scatter.
    m.grads += made + full_grads_acc + (zero12 && !full_grads_acc ? pb * sz.block_grad : 0) + (fsdp ? pb * sz.block_grad : 0);
    m.activations = (held - 1) * L * act.block_held(ac) + i * act.block_held(ac) + act.block;
    m.weight_copies = ac ? block_copy : (i + 1) * block_copy;
    m.gathered = fsdp ? root_full + (cfg.parallel.fsdp_reshard_after_forward ? (i > 0 ? 2 : 1) * block_full
                                                                              : (i + 1) * block_full)
                      : 0;
    m.comm_buffers = rs_unit;
    m.transient += act.block_backward;
    w.point(m, "block " + std::to_string(i) + " backward");
  }
  // End of backward: every gradient; a tied embedding's lookup gradient is added into the head's (a
  // temporary of its size); bf16 reduction casts each DDP bucket.
  {
    MemoryItems m = base;
    m.grads += plain_grads + full_grads_acc;
    m.transient += cfg.model.tie_embeddings ? 4 * sz.head_grad : 0;
    m.gathered = root_full;
    const int64_t bucket_bytes = l.stream ? l.stream_bytes : 4;
    m.comm_buffers = l.reducer && l.reduce_bytes != bucket_bytes ? l.reduce_bytes * st.grads / bucket_bytes : 0;
    w.point(m, "end of backward");
  }

  MemoryEstimate e;
  e.peak = w.best;
  e.peak_at = w.at;
  e.peak_allocated = w.best.sum();
  e.allocator_slack = e.peak_allocated / 20;
  e.context = cuda ? gpu.context_bytes : 0;
  // NCCL's channel buffers, per communicator this rank is part of (world, and each parallel group > 1).
  const int64_t groups = (world_size > 1) + (l.dp > 1) + (l.fsdp > 1) + (l.tp > 1) + (l.pp > 1);
  e.nccl = cuda ? groups * (64ll << 20) : 0;
  e.device_total = e.peak_allocated + e.allocator_slack + e.context + e.nccl;
  e.device_memory = gpu.memory_bytes;
  e.fits = e.device_total <= e.device_memory;
  e.activation = act;
  e.state = st;
  if (offload) e.host_optimizer = 2 * st.optimizer;  // master + gradient buffers: as many bytes as m + v
  // Streamed with accumulation on CUDA: a pinned fp32 staging buffer per parameter (half of m + v).
  if (l.stream && A > 1 && cuda) e.host_optimizer += st.optimizer / 2;
  return e;
}

}  // namespace meshtrain::plan
