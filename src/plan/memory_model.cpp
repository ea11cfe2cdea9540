// The step walk of memory_model.h.
#include "meshtrain/plan/memory_model.h"

#include <algorithm>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/gradient_streaming.h"
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
  int64_t dequantized = 0;                // the largest NF4 weight's elements: its dequantized copy around a GEMM
  bool block_weights_train = false;       // some block's base weight trains (LoRA: only its adapters do)
  bool embed_trains = true;               // the token embedding trains (LoRA: frozen, held in the compute dtype)
};

Sizes sizes(const Config& cfg, const RankLayout& l) {
  Sizes s;
  int64_t run = -1, run_trainable = 0;  // the block run being summed (its first block) and its trainable elements
  for (const auto& g : param_groups(cfg)) {
    const ParamSpec& p = g.spec;
    const bool train = g.trains;
    int64_t n = 1;
    for (int64_t d : p.tp_shape(0, l.tp)) n *= d;
    // QLoRA's NF4 weights are never cast: each is dequantized for its GEMM (nf4_linear.h); FSDP gathers their
    // rows as bytes (rank_state.h).
    const bool nf4 = held_in_nf4(l, p, train);
    if (nf4) s.dequantized = std::max(s.dequantized, n);
    // parallelize(): a frozen parameter may be held in the compute dtype already (LoRA's base), then not cast.
    const int64_t cast = !nf4 && p.matmul && (train || l.frozen_bytes == 4) ? n : 0;
    // FSDP gathers a trainable unit in param_dtype, a frozen one in the dtype it is held in (rank_state.cpp).
    const int64_t held_bytes = train || l.frozen_bytes == 4 ? l.param_bytes : l.frozen_bytes;
    const int64_t gathered = nf4 ? nf4_gathered_bytes(n) : held_bytes * n;
    if (p.block == 0) s.block += n, s.block_cast += cast, s.block_gathered += gathered;
    if (p.block < 0) {
      if (p.name.rfind("tok_embed.", 0) == 0) s.embed_trains = train;
      s.root += n;
      s.root_gathered += gathered;
      s.root_cast += cast;
      s.root_trainable += train ? n : 0;
      if (p.matmul) s.head_grad = train ? n : 0;
      continue;
    }
    s.block_trainable += train ? g.blocks * n : 0;
    s.block_weights_train |= p.matmul && train && cfg.model.lora_rank == 0;
    // Every block of a run holds as many trainable elements as its first: the most of any run is block_grad.
    if (p.block != run) run = p.block, run_trainable = 0;
    run_trainable += train ? n : 0;
    s.block_grad = std::max(s.block_grad, run_trainable);
  }
  return s;
}

// The peak so far of the step walk: the first point, or a later one holding more.
struct Walk {
  MemoryItems best;
  std::string at;
  void point(const MemoryItems& m, const std::string& where) {
    if (at.empty() || m.sum() > best.sum()) best = m, at = where;
  }
};

// What the walk reads at every point of the step, each named once: the layout, the state, the sizes of a
// unit, the activations, and the bytes derived from them.
struct Step {
  RankLayout layout;
  RankState state;
  Sizes sizes;
  ActivationBytes act;
  bool checkpointing = false;
  bool reshard_after_forward = false;
  bool offload = false;                 // optimizer.offload: cpu
  bool memory_snapshots = false;        // checkpoint.memory_every ≠ 0: in-memory checkpoints in host memory
  int64_t blocks = 0;                   // this pipeline stage's blocks
  int64_t layers = 0;                   // the whole model's (model.n_layer)
  int64_t accumulation = 1;             // train.grad_accum
  int64_t microbatches_held = 1;        // whose activations are alive at once (the pipeline's warm-up)
  bool fsdp = false;                    // units gathered and resharded (ZeRO-3, not aliased)
  bool zero12 = false;                  // ZeRO-1/2, not aliased
  bool grad_buffer = false;             // gradients in a buffer kept for the run (DDP buckets, shard gradients)
  int64_t plain_grads = 0;              // else: a plain model's gradients, made by backward
  int64_t accumulated_full_grads = 0;   // ZeRO-1 accumulating: every unit's full gradients, kept
  int64_t block_copy = 0, root_copy = 0;  // autocast's bf16 copies of a block's / the root's fp32 weights
  int64_t block_full = 0, root_full = 0;  // a gathered unit's full bytes under FSDP
  int64_t reduce_scatter_unit = 0;      // the running unit's reduce-scatter buffers
  int64_t dequant_bytes = 0;            // QLoRA: one NF4 weight dequantized to the compute dtype
};

ActivationBytes step_activations(const Config& cfg, const RankLayout& l, const Sizes& sz, bool cuda) {
  const bool bf16 = compute_dtype(cfg.train, cuda) == Dtype::bf16;
  // A frozen embedding held in bf16 (parallelize(): LoRA's base, replicated or gathered) looks up bf16 rows,
  // and the blocks' residual adds stay bf16: the checkpointed block input is 2 bytes a value, not 4.
  const int residual = bf16 && !sz.embed_trains && l.frozen_bytes == 2 ? 2 : 4;
  const ActivationInputs in{.micro_batch = cfg.train.micro_batch_size, .seq_len = cfg.data.seq_len, .tp = l.tp,
                            .sequence_parallel = cfg.parallel.sequence_parallel, .compute_bytes = bf16 ? 2 : 4,
                            .fused_kernels = cfg.train.fused_kernels && cuda,
                            .checkpointing = cfg.train.activation_checkpointing,
                            .loss_chunk_bytes = cfg.train.loss_chunk_mb << 20, .head_trains = sz.head_grad > 0,
                            .block_weights_train = sz.block_weights_train, .residual_bytes = residual};
  return activation_bytes(cfg.model, in);
}

// The running unit's reduce-scatter input and output; a group of one writes into the shard gradients (none
// when streamed: then its input is its output, a transient of the unit's size).
int64_t reduce_scatter_buffers(const RankLayout& l, const Sizes& sz) {
  if (l.zero_stage == 0 || l.alias) return 0;
  if (l.shard > 1) return l.reduce_bytes * (sz.block_grad + sz.block_grad / l.shard);
  return l.stream ? l.reduce_bytes * sz.block_grad : 0;
}

Step plan_step(const Config& cfg, int64_t world_size, bool cuda) {
  Step s;
  s.layout = RankLayout::from(cfg, world_size);
  const RankLayout& l = s.layout;
  s.state = worst_rank_state(cfg, world_size);
  s.sizes = sizes(cfg, l);
  s.act = step_activations(cfg, l, s.sizes, cuda);
  s.checkpointing = cfg.train.activation_checkpointing;
  s.reshard_after_forward = cfg.parallel.fsdp_reshard_after_forward;
  s.offload = cfg.optimizer.offload == OptimizerOffload::cpu;
  s.memory_snapshots = cfg.checkpoint.memory_every != 0;
  s.blocks = cfg.model.n_layer / std::max<int64_t>(l.pp, 1);
  s.layers = cfg.model.n_layer;
  s.accumulation = cfg.train.grad_accum;
  s.microbatches_held = held_microbatches(l.pp, 0, s.accumulation);
  s.fsdp = l.zero_stage == 3 && !l.alias;
  s.zero12 = l.zero_stage > 0 && l.zero_stage < 3 && !l.alias;
  s.grad_buffer = l.reducer || l.zero_stage > 0;
  s.plain_grads = s.grad_buffer ? 0 : s.state.grads;
  // ZeRO-1/2: full gradients of a unit (param_dtype) until its reduce-scatter; ZeRO-1 keeps all while accumulating.
  // Only trainable units have gradients (parallel/fsdp/fully_shard.h splits each block by trainable and frozen).
  if (s.zero12 && l.zero_stage == 1 && s.accumulation > 1)
    s.accumulated_full_grads = l.param_bytes * (s.sizes.root_trainable + s.blocks * s.sizes.block_grad);
  // bf16 copies autocast makes of fp32 weights: FSDP/ZeRO with bf16 parameters, streamed or held replicated
  // offload, and a frozen base held in bf16 (LoRA) have none.
  const bool bf16 = compute_dtype(cfg.train, cuda) == Dtype::bf16;
  const bool copies = l.casts_weights(bf16);
  s.block_copy = copies ? 2 * s.sizes.block_cast : 0;
  s.root_copy = copies ? 2 * s.sizes.root_cast : 0;
  s.block_full = s.fsdp ? s.sizes.block_gathered : 0;
  s.root_full = s.fsdp ? s.sizes.root_gathered : 0;
  s.reduce_scatter_unit = reduce_scatter_buffers(l, s.sizes);
  s.dequant_bytes = (bf16 ? 2 : 4) * s.sizes.dequantized;
  return s;
}

// Streamed offload: the gradient being handed over and its fp32 cast on the copy stream — replicated: the
// largest is the embedding's or the head's; FSDP: a unit's reduced shard (the one before the unit whose
// reduce-scatter is running, or the root's at the end), in reduce_dtype, and its fp32 cast when that differs.
int64_t streamed_handover(const RankLayout& l, const Sizes& sz) {
  if (l.stream && l.zero_stage == 0) return (l.stream_bytes + 4) * sz.head_grad;
  if (l.stream && l.zero_stage == 3)
    return (l.reduce_bytes + (l.reduce_bytes == 4 ? 0 : 4)) * std::max(sz.block_grad, sz.root_trainable) / l.shard;
  return 0;
}

// Alive throughout the step: the state (gradients where they are a buffer: DDP buckets, shard gradients; the
// moments unless offloaded, in host memory beside the master copy and the gradients' host buffers:
// train/offloaded_adamw.h) and the token ids.
MemoryItems persistent(const Step& s) {
  const RankState& st = s.state;
  // QLoRA: the dequantized copy of one NF4 weight (model/linear/nf4_linear.h), alive around its GEMM in the
  // forward and again in the backward — at every point the walk looks at, one may be.
  return {.params = st.params, .master = st.master, .frozen = st.frozen, .grads = s.grad_buffer ? st.grads : 0,
          .optimizer = s.offload ? 0 : st.optimizer,
          .transient = s.act.inputs + streamed_handover(s.layout, s.sizes) + s.dequant_bytes};
}

int64_t block_saved(const Step& s) { return s.act.block_held(s.checkpointing); }

// End of forward + the head's backward: every block's saved activations, the weights' copies, the head.
MemoryItems head_backward(const Step& s) {
  MemoryItems m = persistent(s);
  // A plain model accumulating: the previous micro-batches' gradients are alive during the next forward.
  m.grads += (s.accumulation > 1 ? s.plain_grads : 0) + s.accumulated_full_grads;
  m.activations = s.microbatches_held * s.blocks * block_saved(s);
  m.weight_copies = (s.checkpointing ? 0 : s.blocks * s.block_copy) + s.root_copy;
  m.gathered = s.root_full + (s.fsdp && !s.reshard_after_forward ? s.blocks * s.block_full : 0);
  m.loss = s.act.head.saved + std::max(s.act.head.forward_peak, s.act.head.backward_peak);
  return m;
}

// Block `i`'s backward (blocks after it done): its saved set (recomputed under checkpointing) and transients.
MemoryItems block_backward(const Step& s, int64_t i) {
  MemoryItems m = persistent(s);
  const int64_t done = s.blocks - 1 - i;  // blocks already back-propagated
  const int64_t pb = s.layout.param_bytes, block_grad = s.sizes.block_grad;
  // Plain model: the head's weight gradient, then each finished block's (all of them when accumulating).
  const int64_t made = s.accumulation > 1 ? s.plain_grads
                       : s.plain_grads > 0 ? 4 * (s.sizes.head_grad + s.sizes.block_trainable / s.layers * done)
                                           : 0;
  // ZeRO-1/2 and FSDP: the running block's full gradients until its reduce-scatter.
  m.grads += made + s.accumulated_full_grads + (s.zero12 && !s.accumulated_full_grads ? pb * block_grad : 0) +
             (s.fsdp ? pb * block_grad : 0);
  m.activations = (s.microbatches_held - 1) * s.blocks * block_saved(s) + i * block_saved(s) + s.act.block;
  m.weight_copies = s.checkpointing ? s.block_copy : (i + 1) * s.block_copy;
  if (s.fsdp)
    m.gathered = s.root_full + (s.reshard_after_forward ? (i > 0 ? 2 : 1) * s.block_full : (i + 1) * s.block_full);
  m.comm_buffers = s.reduce_scatter_unit;
  m.transient += s.act.block_backward;
  return m;
}

// End of backward: every gradient; a tied embedding's lookup gradient is added into the head's (a temporary
// of its size); bf16 reduction casts each DDP bucket.
MemoryItems end_of_backward(const Step& s, bool tied_embeddings) {
  const RankLayout& l = s.layout;
  MemoryItems m = persistent(s);
  m.grads += s.plain_grads + s.accumulated_full_grads;
  m.transient += tied_embeddings ? 4 * s.sizes.head_grad : 0;
  m.gathered = s.root_full;
  const int64_t bucket_bytes = l.stream || l.hold ? l.stream_bytes : 4;
  m.comm_buffers = l.reducer && l.reduce_bytes != bucket_bytes ? l.reduce_bytes * s.state.grads / bucket_bytes : 0;
  return m;
}

// The walk's points in the trainer's order; the first of equal peaks is the one reported. Every item of
// block_backward(s, i) is affine in i for i ≥ 1 (a gathered unit's prefetch only changes at i = 0), so the
// largest over blocks − 1 … 1 is at one end, and the walk need only visit blocks − 1, 1 and 0: the same peak,
// in the same order, without a pass over the layers.
Walk walk_step(const Step& s, bool tied_embeddings) {
  Walk w;
  w.point(head_backward(s), "head backward");
  const int64_t last = s.blocks - 1;
  std::vector<int64_t> visit;
  if (last >= 0) visit.push_back(last);
  if (last > 1) visit.push_back(1);
  if (last > 0) visit.push_back(0);
  for (int64_t i : visit) w.point(block_backward(s, i), "block " + std::to_string(i) + " backward");
  w.point(end_of_backward(s, tied_embeddings), "end of backward");
  return w;
}

// What the device holds beyond the allocator's peak, and the host bytes of an offloaded optimizer.
void add_totals(MemoryEstimate& e, const Step& s, int64_t world_size, const GpuSpec& gpu, bool cuda) {
  const RankLayout& l = s.layout;
  e.allocator_slack = e.peak_allocated / 20;
  e.context = cuda ? gpu.context_bytes : 0;
  // NCCL's channel buffers, per communicator this rank is part of (world, and each parallel group > 1).
  const int64_t groups = (world_size > 1) + (l.dp > 1) + (l.fsdp > 1) + (l.tp > 1) + (l.pp > 1);
  e.nccl = cuda ? groups * (64ll << 20) : 0;
  e.device_total = e.peak_allocated + e.allocator_slack + e.context + e.nccl;
  e.device_memory = gpu.memory_bytes;
  e.fits = e.device_total <= e.device_memory;
  if (s.offload) e.host_optimizer = 2 * s.state.optimizer;  // master + gradient buffers: as many bytes as m + v
  // Held: no gradient buffers (the master is half of m + v), a few pinned slots instead (core/gradient_streaming.h).
  if (l.hold) e.host_optimizer = s.state.optimizer + s.state.optimizer / 2 + kHeldSlotBytes;
  // Streamed with accumulation on CUDA: a pinned fp32 staging buffer per parameter (half of m + v).
  if (l.stream && s.accumulation > 1 && cuda) e.host_optimizer += s.state.optimizer / 2;
  if (s.memory_snapshots) e.host_snapshots = s.state.optimizer + s.state.optimizer / 2;
}

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, int64_t world_size, const GpuSpec& gpu, bool cuda) {
  const Step step = plan_step(cfg, world_size, cuda);
  const Walk w = walk_step(step, cfg.model.tie_embeddings);
  MemoryEstimate e;
  e.peak = w.best;
  e.peak_at = w.at;
  e.peak_allocated = w.best.sum();
  e.activation = step.act;
  e.state = step.state;
  add_totals(e, step, world_size, gpu, cuda);
  return e;
}

}  // namespace meshtrain::plan
