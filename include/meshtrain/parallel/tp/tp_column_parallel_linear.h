// ColumnParallelLinear: a Linear whose output features are split over the tensor-parallel group (Megatron's
// ColumnParallelLinear). Rank r holds rows [r·out/tp, (r+1)·out/tp) of the weight and the same block of the
// bias; its output is its block of features, left split (the next layer is row-parallel, or attention over
// this rank's heads). The input enters the TP region through copy_to_tp_region (backward all-reduces the
// partial input gradients), or, under sequence parallelism, through gather_from_sp_region (the input holds
// seq/tp tokens; backward reduce-scatters). Stands in for the model's Linear under the same module name, so
// parameter names do not change.
#pragma once

#include "meshtrain/parallel/tp/tp_linear.h"

namespace meshtrain::parallel {

class ColumnParallelLinearImpl : public TpLinearImpl {
 public:
  // weight: [out/tp, in] this rank's block; bias: [out/tp] or undefined. Both become the parameters as is.
  ColumnParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp);
  // x: [B, T, in] (T/tp tokens under sequence parallelism) → [B, T, out/tp]
  at::Tensor forward(const at::Tensor& x) override;
  // copy_to_tp_region is the identity in a forward: without sequence parallelism and adapters, forward is this
  // rank's block x·Wᵀ + b, so a rank's q, k and v shards (or gate and up) may share one GEMM in inference.
  bool plain_in_inference() const override { return !sequence_parallel() && !has_adapters(); }
};

}  // namespace meshtrain::parallel
