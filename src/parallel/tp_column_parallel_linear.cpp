#include "meshtrain/parallel/tp_column_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp_regions.h"

namespace meshtrain::parallel {

ColumnParallelLinearImpl::ColumnParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                                   SequenceParallelFlag sp)
    : TpLinearImpl(std::move(weight), std::move(bias), std::move(tp), std::move(sp)) {}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  auto in = sequence_parallel() ? gather_from_sp_region(x, tp_) : copy_to_tp_region(x, tp_);  // [B, T, in]
  return at::linear(in, weight, bias);                                                         // [B, T, out/tp]
}

}  // namespace meshtrain::parallel
