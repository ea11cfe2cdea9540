// FullyShard: parameters, gradients and optimizer state sharded over a group (ZeRO stages 1-3 / FSDP2),
// optionally replicated over a second group (HSDP: replicate × shard on a 2-D mesh).
//
// Units: each transformer block of the model's block list is one unit; everything else (embeddings, final
// norm, head) is the root unit. Frozen parameters (requires_grad false; parallel/trainable_policy.h) of a
// block or the root form a unit of their own, parameter-only: no gradient buffer, no reduce-scatter, gathered
// and freed with their block (stage 3: freed once the backward has moved past the block), never stale. Every parameter is split by rows of dim 0 (parallel/fsdp/dim0_shard.h); a unit's pieces sit in one flat
// fp32 buffer per rank (the master shard the optimizer updates), so a unit moves with one all-gather (params,
// in param_dtype) and one reduce-scatter (gradients, in reduce_dtype).
//
// The module keeps its parameters (names, shapes, autograd identity), but their storage exists only while
// gathered: freeing releases the storage itself, so tensors autograd saved from them (views included) give
// their memory back too, and gathering refills the same storage. Autograd accumulates full gradients into
// .grad; a post-accumulate hook reduce-scatters a unit as soon as its last gradient landed. (With a shard
// group of one and fp32 compute the parameters are views of the flat shards instead; see alias_.)
//
//   stage 3 (FSDP): a BlockRunner gathers block i before it runs (prefetching block i+1) and frees it after
//     (unless reshard_after_forward is off); an identity autograd node at the block's output gathers it again
//     in backward before the block's backward runs (prefetching block i-1); after the reduce-scatter the unit
//     is freed. The root unit is gathered in pre_forward and freed after its reduce-scatter.
//   stage 2 (ZeRO-2): parameters stay gathered; gradients are reduce-scattered every micro-step and the full
//     gradients freed; after the optimizer step all units are gathered again before the next forward.
//   stage 1 (ZeRO-1): as stage 2, but accumulation micro-steps keep full gradients and reduce nothing.
//   streamed (optimizer offload, stage 3; stream_gradients()): shards held in the compute dtype, no gradient shard;
//     each micro-batch's reduced shard gradient goes to the host optimizer during the backward.
//
// Storage a block's layers hold outside their parameters — QLoRA's NF4 weights (model.base_quant nf4,
// model/linear/linear.h hold_nf4_rows) — is sharded like a frozen parameter: per block one more frozen unit, of
// bytes, each NF4 weight three byte tensors by rows of 256 quantization blocks (Nf4Tensor::as_rows: codes,
// absmax codes, scale), so a rank holds whole blocks; gathered as bytes (a quarter of the bf16 weight's) with
// the block and freed with it, then dequantized by the layer. Not module parameters, they are in neither
// shard_parameters() nor sharded_parameters() (no optimizer or checkpoint sees them); a layer's new values
// (the base re-quantized from checkpoint.init_from) come through its store and overwrite this rank's rows.
//
// Over tensor parallelism (FSDP × TP, parallel/tp/tensor_parallel.h) the module's parameters are this rank's TP
// blocks, and each is split by rows like any parameter: the shard is FSDP's dim-0 chunk inside the TP block,
// so its global offsets are the block's plus the chunk's row (still a rectangle; checkpoints reshard it). Meta
// blocks are initialised here, chunk by chunk, at those global offsets.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/model/block_runner.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/fsdp/dim0_shard.h"
#include "meshtrain/parallel/gradient_sink.h"
#include "meshtrain/parallel/pending_collective.h"
#include "meshtrain/parallel/tp/tensor_parallel.h"

namespace meshtrain::parallel {

struct FullyShardOptions {
  int zero_stage = 3;                        // 1, 2 or 3 (see above)
  bool reshard_after_forward = true;         // stage 3: free each block after its forward
  at::ScalarType param_dtype = at::kFloat;   // gathered parameters (compute); the shards stay fp32
  at::ScalarType reduce_dtype = at::kFloat;  // gradient reduce-scatter / all-reduce
  bool allow_unused = false;                 // a parameter without a gradient counts as zeros
  MasterLocation master_location = MasterLocation::device;  // fp32 shards and optimizer state (device only)
  // Frozen units' shards are held and gathered in this dtype (LoRA's base: the compute dtype, so a frozen
  // weight costs 2 bytes, not 4, and gathers half the bytes); none: like trainable ones (fp32 shards, gathered
  // in param_dtype).
  std::optional<at::ScalarType> frozen_dtype;
};

class FullyShard {
 public:
  // Gives every parameter of `net` its shard — initialised for `seed` (layout-independent) where the
  // parameter is still on the meta device, else copied from its current value — and full-shape tensors
  // without storage in the module, and moves the buffers to `device`.
  // `shard`: the group parameters are split over; `replicate`: HSDP's replica group (null: none); `tp`: the
  // tensor-parallel layout `net` was already cut into (null: none).
  FullyShard(model::TransformerImpl& net, int64_t seed, const at::Device& device, comm::CommPtr shard,
             comm::CommPtr replicate, FullyShardOptions opts, std::shared_ptr<const TensorParallel> tp = nullptr);
  ~FullyShard();
  FullyShard(const FullyShard&) = delete;
  FullyShard& operator=(const FullyShard&) = delete;

  // Stage 3's runner (gather / free around each block); empty for stages 1-2.
  model::BlockRunner block_runner();
  // Before each forward: gathers the root unit (stage 3) or every stale unit (stages 1-2) and arms the
  // gradient counters.
  void pre_forward();
  // Before a backward whose forward was not the last one (a pipeline runs several forwards before their
  // backwards): the root unit, freed after an earlier backward's reduce-scatter, is gathered again. A no-op
  // right after a forward.
  void ensure_root_gathered();
  void set_requires_sync(bool sync) { requires_sync_ = sync; }
  // After each backward: waits for the reduce-scatters (and HSDP's all-reduce), adds the result into the
  // shard gradients. A parameter without a gradient is a UserError naming it. Idempotent.
  void finish_gradient_sync();
  // The next finish_gradient_sync overwrites the shard gradients instead of adding.
  void zero_grad();
  // After the optimizer updated the shards: gathered parameters are out of date.
  void mark_parameters_stale();
  // Gathers every unit and keeps it until the next step (generation, which runs no BlockRunner).
  void gather_all();

  struct ShardParam {
    std::string name;
    at::Tensor shard;  // this rank's rows (a view into the unit's flat shard: fp32, or param_dtype when
                       // streaming: the compute dtype); .grad set after a sync (never streaming)
    bool trains;       // false: frozen (no gradient, not for the optimizer)
  };
  std::vector<ShardParam> shard_parameters() const;
  // Each shard as a block of its global parameter; `write` on replica 0 (HSDP) and, for TP-replicated
  // parameters, on tp rank 0.
  std::vector<ShardedTensor> sharded_parameters() const;
  // Sum over the shard group (and the tp group: TP-replicated parameters counted once) of the squared shard
  // gradients (a device scalar); sqrt = global norm.
  at::Tensor grad_norm_squared();
  // Elements per rank of all flat shards (padding included): the memory formula's "params / shards".
  int64_t shard_numel() const;
  // Bytes of this rank's shards of the storage held outside the parameters (the NF4 rows above, padding
  // included): what the planner counts as their share (plan/rank_state.h).
  int64_t held_shard_bytes() const;
  // Bytes of that storage gathered now: ZeRO-1/2 keep it gathered; FSDP only while a block uses it.
  int64_t held_gathered_bytes() const;
  // Ranks the parameters and gradients are split over.
  int64_t shard_ranks() const { return shard_->size(); }

  // Optimizer offload (parallel/gradient_sink.h), FSDP/HSDP (stage 3) only: from now on each trainable unit
  // keeps its shard only in `dtype` (the compute dtype: what the all-gather reads, cast to param_dtype where
  // that differs; the fp32 master is the sink's) and no gradient shard. Every micro-batch's reduce-scattered (and, HSDP, replica-averaged) shard gradient goes to
  // `sink` once its reduction has finished — looked at when the next unit's reduction starts, so the compute
  // stream never waits for the collective it just queued — and is dropped at once; grad_norm_squared() then
  // sums the sink's squares. Call once, before the first step. False where it cannot: stages 1-2, tensor
  // parallelism (sequence parallelism sums shard gradients after the backward), a group of one aliased to
  // the module.
  bool stream_gradients(GradientSink& sink, at::ScalarType dtype);
  bool streaming() const { return sink_ != nullptr; }

 private:
  struct Param {
    std::string name;
    at::Tensor full;  // the module's parameter (full shape; storage only while gathered)
    Dim0Shard layout;  // over the module's parameter (the TP block under TP)
    int64_t offset;   // of its padded piece in the unit's flat buffers
    at::Tensor shard;       // local rows, view into unit.shard_flat
    at::Tensor shard_grad;  // local rows, view into unit.grad_flat
    bool seen = false;
    size_t unit = 0;
    bool held = false;  // storage a layer holds outside its parameters (NF4 rows), not a module parameter
  };
  struct Unit {
    std::vector<size_t> params;
    size_t block = 0;            // index in the model's block list; the root's is the block count
    bool trains = true;          // false: frozen parameters only (no grad_flat, nothing reduced)
    bool held = false;           // the block's NF4 rows: frozen bytes
    int64_t numel = 0;           // S: per-rank flat size
    at::Tensor shard_flat;       // [S] fp32 (a frozen unit: opts.frozen_dtype where set)
    at::Tensor grad_flat;        // fp32 [S]; undefined for a frozen unit, and until allocate_gradients()
    bool gathered = false, stale = true;
    at::Tensor gather_out;       // [W × S] param_dtype, while a gather is in flight
    PendingCollective gather;
    size_t pending = 0;          // gradients still to land in this backward
    bool reduce_started = false;
    at::Tensor rs_out;           // [S] reduce_dtype
    PendingCollective reduce;
  };

  // Construction steps: units from the block list, shards initialised, module parameters replaced.
  void assign_units(model::TransformerImpl& net);
  void init_shards(model::TransformerImpl& net, int64_t seed);
  void install_parameters(model::TransformerImpl& net);
  // The NF4 rows: a frozen byte unit per block that has some; then each layer reads its rows from the unit's
  // full tensors and writes values through store_held — first its current ones (or, held by sizes only, the
  // weight drawn for `seed` and quantized), one weight at a time.
  void assign_held(model::TransformerImpl& net);
  void install_held(model::TransformerImpl& net, int64_t seed);
  void store_held(size_t first, const std::vector<at::Tensor>& rows);
  // The fp32 shard gradients (grad_flat and each shard_grad view), made when the first reduction needs them:
  // a streaming sink (stream_gradients()) is set before that, so the streamed layout never holds them — not
  // even while the model is built, where they would add 4 bytes a trainable parameter to the device's peak.
  void allocate_gradients();
  // The dtype a unit's shards are held in, and the one its gathered parameters have.
  at::ScalarType stored_dtype(const Unit& unit) const;
  at::ScalarType gathered_dtype(const Unit& unit) const;
  // Units of block b (the root: b = root_); gathered = every one of them up to date.
  bool block_gathered(size_t b) const;
  void start_gather_block(size_t b);
  void ensure_block_gathered(size_t b);
  void free_block(size_t b, bool frozen_only);
  void start_gather(size_t u);
  void ensure_gathered(size_t u);
  void free_unit(size_t u);
  void on_gradient(size_t k);
  void start_reduce(size_t u);
  // Streaming's end of the backward: the last reductions handed over, the units ready for the next one.
  void finish_streamed_sync();
  // Streaming: waits for unit u's reduction (and HSDP's all-reduce), hands each parameter's rows to the sink.
  void hand_over(size_t u);
  at::Tensor run_block(size_t b, const at::Tensor& x, const model::BlockFn& run);

 public:
  void pre_backward(size_t b);  // from the identity node at block b's output

 private:
  // Global shape and offsets of p's shard (composed with the TP block's).
  std::vector<int64_t> global_shape(const Param& p) const;
  std::vector<int64_t> global_offsets(const Param& p) const;

  struct Held {
    std::shared_ptr<model::LinearImpl> layer;
    size_t first = 0;  // its three row tensors: params_[first .. first + 2]
  };
  std::vector<Held> held_;
  std::vector<Param> params_;
  std::vector<Unit> units_;
  std::vector<std::vector<size_t>> block_units_;  // per block 0..L-1, then the root: its units
  size_t root_;
  comm::CommPtr shard_, replicate_;
  std::shared_ptr<const TensorParallel> tp_;
  FullyShardOptions opts_;
  at::Device device_;
  bool requires_sync_ = true, fresh_grads_ = true, synced_ = true;
  // A group of one with fp32 compute parameters: the module's parameters are the shards themselves and
  // autograd accumulates straight into the flat gradients, so nothing is gathered, copied or reduced
  // (world-size-1 runs of a sharded config cost what the plain model costs).
  bool alias_ = false;
  bool gradients_allocated_ = false;
  // Streaming (stream_gradients): the sink, each parameter's optimizer index, and the units whose reduction
  // is in flight and not handed over yet (in order).
  GradientSink* sink_ = nullptr;
  std::vector<size_t> sink_index_;
  std::vector<size_t> handing_;
};

}  // namespace meshtrain::parallel
