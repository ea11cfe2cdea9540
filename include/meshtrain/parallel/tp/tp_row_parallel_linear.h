// RowParallelLinear: a Linear whose input features are split over the tensor-parallel group (Megatron's
// RowParallelLinear), the partner of ColumnParallelLinear. Rank r holds columns [r·in/tp, (r+1)·in/tp) of
// the weight, multiplies its block of input features, and the partial outputs leave the TP region summed by
// reduce_from_tp_region (or, under sequence parallelism, reduce_scatter_to_sp_region: each rank keeps seq/tp
// tokens of the sum). The bias is replicated and added once, after the reduction.
#pragma once

#include "meshtrain/parallel/tp/tp_linear.h"

namespace meshtrain::parallel {

class RowParallelLinearImpl : public TpLinearImpl {
 public:
  // weight: [out, in/tp] this rank's block; bias: [out] (the whole bias) or undefined.
  RowParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp);
  // x: [B, T, in/tp] → [B, T, out] (T/tp tokens under sequence parallelism)
  at::Tensor forward(const at::Tensor& x) override;
};

}  // namespace meshtrain::parallel
