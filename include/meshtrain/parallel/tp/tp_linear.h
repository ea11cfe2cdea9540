// TpLinearImpl: what ColumnParallelLinear and RowParallelLinear share — a model::Linear standing in under the
// same module name whose parameters are this rank's blocks, the tensor-parallel group, and the sequence-
// parallel switch. The switch is shared with TensorParallel (one flag for every layer and the head), which
// turns sequence parallelism off for generation: one token at a time cannot be split over the group.
// A layer that replaces a LoRA projection (model/linear/lora_linear.h) carries its adapters too, as `lora_A` and
// `lora_B` beside the weight, each cut the way its split needs (ColumnParallelLinear, RowParallelLinear).
#pragma once

#include <memory>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/model/linear/linear.h"

namespace meshtrain::parallel {

// True while sequence parallelism is on; null means never on.
using SequenceParallelFlag = std::shared_ptr<const bool>;

class TpLinearImpl : public model::LinearImpl {
 public:
  // LoRA: this rank's pieces of the adapters (registered as `lora_A` [r, in'] and `lora_B` [out', r]); the
  // layer adds scale · B (A (dropout x)) to its matmul's output (docs/lora.md "Tensor parallelism").
  void add_adapters(at::Tensor a, at::Tensor b, double scale, double dropout);
  bool has_adapters() const { return lora_A.defined(); }
  // The matmul is on this rank's block, between collectives: no fused GELU epilogue.
  bool can_fuse_gelu() const override { return false; }
  // The block's product is local_product(): its weight may be held in FP8 for serving, unless adapters ride on it.
  bool can_hold_fp8() const override { return holds_plain_weight() && !has_adapters(); }

  at::Tensor lora_A;  // undefined without adapters
  at::Tensor lora_B;

 protected:
  // weight: this rank's [out', in'] block; bias: its block or the whole bias, or undefined. Both become the
  // parameters as is (the base class is built on the meta device and allocates nothing).
  TpLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp);

  bool sequence_parallel() const { return sp_ && *sp_; }
  // scale · B (A (dropout x)) for x: [..., in'] holding features [offset, offset + in') of the layer's
  // `width`-wide input (dropout's mask drawn for the whole width: model::lora_dropout).
  at::Tensor adapters(const at::Tensor& x, int64_t width, int64_t offset);

  comm::CommPtr tp_;

 private:
  SequenceParallelFlag sp_;
  double lora_scale_ = 0.0, lora_dropout_ = 0.0;
};

}  // namespace meshtrain::parallel
