// Megatron-style tensor parallelism (TP) of the Transformer over one TP group (docs/architecture.md, room `parallel`).
//
// apply_tensor_parallel rewrites a model in place so that each rank of `tp` holds and computes its share:
//   attention   wq, wk, wv  ColumnParallelLinear, split by heads (rank r: query heads [r·H/tp, (r+1)·H/tp) and
//                           key/value heads [r·Hkv/tp, ...)); attention runs on the local heads
//               wo          RowParallelLinear (bias added once, after the reduction)
//   MLP         up, gate    ColumnParallelLinear over d_ff;  down: RowParallelLinear
//   tok_embed               VocabParallelEmbedding (vocabulary rows split as evenly as possible)
//   output head             column-parallel over the vocabulary (lm_head rows, or tok_embed's rows when tied —
//                           one tensor, so tied stays tied); the loss is the vocab-parallel cross-entropy, so no
//                           rank forms full logits. forward() (generation, evaluation of logits) gathers them.
//   norms, pos_embed        replicated
//   LoRA adapters           column-parallel: A [r, in] replicated, B split by output rows like the weight;
//                           row-parallel: A split by input columns like the weight, B [out, r] replicated.
//                           The replicated piece's gradient is partial on each rank (finish_gradients sums it).
// With parallel.sequence_parallel the residual stream between TP regions holds seq_len/tp tokens per rank:
// the embeddings are split after the lookup, column-parallel layers all-gather their input, row-parallel
// ones reduce-scatter their output. The replicated parameters that then see only this rank's tokens (norms,
// row-parallel biases) have partial gradients: TensorParallel::finish_gradients sums them over `tp` (once per
// step, after the last backward — like Megatron's finalize_model_grads; not a hook on the parameter, which
// activation checkpointing's inner autograd::grad would fire a second time).
//
// The model never sees the communicator: the TP layers stand in for its Linear/Embedding modules under the
// same names, and the head and loss go through model::TransformerHooks. Parameters keep their global names.
// A meta-device model gets only this rank's blocks allocated (on train.device), initialised exactly like the
// same elements of the single-process model (model/init.h).
//
// Order: call it first, before activation checkpointing and before FSDP/DDP wrap the model (parallelize()).
// Generation under sequence parallelism: one token at a time cannot be split over the group, so
// TensorParallel::SequenceParallelOff switches every layer to plain TP for its lifetime (same parameters, same
// results). Not supported under TP yet: model.dropout > 0 (would need a TP-aware RNG).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/tp/tp_linear.h"

namespace meshtrain::parallel {

class TensorParallel {
 public:
  // Where each parameter's local tensor sits in the global one.
  struct Layout {
    std::vector<int64_t> global_shape;
    std::vector<int64_t> offsets;  // all 0 for replicated parameters
    bool replicated = false;
    // Replicated, but each rank's gradient is its share of the sum over the group, with or without sequence
    // parallelism: LoRA's whole adapter beside a split weight (docs/lora.md "Tensor parallelism").
    bool partial_grad = false;
  };

  // `sp`: the switch the layers read (null or false: no sequence parallelism).
  TensorParallel(comm::CommPtr tp, std::shared_ptr<bool> sp, std::map<std::string, Layout> layouts);

  // Plain TP (no sequence split) while alive: generation and its KV cache. Not nestable; every TP rank
  // must hold one around the same calls.
  class SequenceParallelOff {
   public:
    explicit SequenceParallelOff(const TensorParallel* tp) : flag_(tp ? tp->sp_ : nullptr) {
      if (flag_) *flag_ = false;
    }
    ~SequenceParallelOff() {
      if (flag_) *flag_ = true;
    }
    SequenceParallelOff(const SequenceParallelOff&) = delete;
    SequenceParallelOff& operator=(const SequenceParallelOff&) = delete;

   private:
    std::shared_ptr<bool> flag_;
  };

  // Every parameter of `model` (the one it was applied to) as a block of its global tensor; `local` is the
  // live parameter. Sharded blocks are written by every TP rank (they differ), replicated ones by TP rank 0.
  std::vector<ShardedTensor> sharded_parameters(const model::TransformerImpl& model) const;
  const Layout& layout(const std::string& name) const;
  // All-reduces over `tp`, in one collective, the replicated parameters' gradients that are partial on each
  // rank: under sequence parallelism those that saw only this rank's tokens, and LoRA's replicated adapter
  // pieces (Layout::partial_grad); a no-op without any. Call on every TP rank after the step's last backward
  // (accumulated micro-batches need it once), before clipping and the optimizer. Sums commute with the
  // data-parallel reduction, so before or after DDP's all-reduce / FSDP's reduce-scatter are both right.
  void finish_gradients(const model::TransformerImpl& model) const;
  // The same on gradients that live elsewhere (FSDP's shard gradients): `grad_of(name)` is the tensor to sum
  // in place, undefined for a frozen parameter (skipped). A replicated parameter is sharded identically on
  // every TP rank, so its shards sum like wholes.
  void finish_gradients(const std::function<at::Tensor(const std::string& name)>& grad_of) const;
  // True where this rank contributes `name` to a sum over the TP group that must count every element once
  // (global gradient norm, checkpoint writers): TP-sharded blocks on every rank, replicated ones on rank 0.
  bool counts(const std::string& name) const;
  // Sums a per-rank partial (e.g. squared gradient norms of the parameters this rank counts) over `tp`, in place.
  void sum_over_group(at::Tensor& t) const;
  // "tp 2 (sequence parallel)", for the log.
  std::string describe() const;
  // The parameters finish_gradients reduces (global names).
  const std::vector<std::string>& partial_gradients() const { return partial_grads_; }

  const comm::CommPtr& group() const { return tp_; }
  bool sequence_parallel() const { return sp_ != nullptr; }

 private:
  comm::CommPtr tp_;
  std::shared_ptr<bool> sp_;  // null without sequence parallelism
  std::map<std::string, Layout> layouts_;
  std::vector<std::string> partial_grads_;
};

// Shards `model` over `tp` (size = cfg.parallel.tp) as above; cfg.parallel.sequence_parallel turns sequence
// parallelism on; cfg.train.seed (and .device) serve meta-device models. UserError (one line, with the
// arithmetic) when model.n_head, model.n_kv_head or model.d_ff is not divisible by tp, or the vocabulary is
// smaller than tp, or model.dropout > 0.
std::shared_ptr<TensorParallel> apply_tensor_parallel(model::TransformerImpl& model, comm::CommPtr tp,
                                                      const Config& cfg);
// As above, with the blocks of a meta-device model allocated on `device` — or left on the meta device when
// `device` is meta: FSDP then initialises only its chunk of each block (parallelize()).
std::shared_ptr<TensorParallel> apply_tensor_parallel(model::TransformerImpl& model, comm::CommPtr tp,
                                                      const Config& cfg, const at::Device& device);

}  // namespace meshtrain::parallel
