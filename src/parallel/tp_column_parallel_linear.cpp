#include "meshtrain/parallel/tp_column_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp_regions.h"

namespace meshtrain::parallel {

// The base class is built on the meta device (allocates nothing); the blocks then replace its parameters.
ColumnParallelLinearImpl::ColumnParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                                   bool sequence_parallel)
    : LinearImpl(weight.size(1), weight.size(0), bias.defined(), weight.options().device(at::kMeta)),
      tp_(std::move(tp)),
      sequence_parallel_(sequence_parallel) {
  replace_parameter("weight", std::move(weight));
  if (bias.defined()) replace_parameter("bias", std::move(bias));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  auto in = sequence_parallel_ ? gather_from_sp_region(x, tp_) : copy_to_tp_region(x, tp_);  // [B, T, in]
  return at::linear(in, weight, bias);                                                         // [B, T, out/tp]
}

}  // namespace meshtrain::parallel
