#include "meshtrain/parallel/tp_row_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp_regions.h"

namespace meshtrain::parallel {

RowParallelLinearImpl::RowParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                             bool sequence_parallel)
    : LinearImpl(weight.size(1), weight.size(0), bias.defined(), weight.options().device(at::kMeta)),
      tp_(std::move(tp)),
      sequence_parallel_(sequence_parallel) {
  replace_parameter("weight", std::move(weight));
  if (bias.defined()) replace_parameter("bias", std::move(bias));
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  auto partial = at::linear(x, weight);  // [B, T, out]: this rank's share of the sum
  auto y = sequence_parallel_ ? reduce_scatter_to_sp_region(partial, tp_) : reduce_from_tp_region(partial, tp_);
  // After the reduction, so the bias counts once (not tp times).
  return bias.defined() ? y + bias : y;
}

}  // namespace meshtrain::parallel
