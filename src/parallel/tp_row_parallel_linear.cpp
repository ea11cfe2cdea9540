#include "meshtrain/parallel/tp_row_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp_regions.h"

namespace meshtrain::parallel {

RowParallelLinearImpl::RowParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                             SequenceParallelFlag sp)
    : TpLinearImpl(std::move(weight), std::move(bias), std::move(tp), std::move(sp)) {}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  auto partial = at::linear(x, weight);  // [B, T, out]: this rank's share of the sum
  auto y = sequence_parallel() ? reduce_scatter_to_sp_region(partial, tp_) : reduce_from_tp_region(partial, tp_);
  // After the reduction, so the bias counts once (not tp times).
  return bias.defined() ? y + bias : y;
}

}  // namespace meshtrain::parallel
