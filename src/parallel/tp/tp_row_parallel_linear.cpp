#include "meshtrain/parallel/tp/tp_row_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp/tp_regions.h"

namespace meshtrain::parallel {

RowParallelLinearImpl::RowParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                             SequenceParallelFlag sp)
    : TpLinearImpl(std::move(weight), std::move(bias), std::move(tp), std::move(sp)) {}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  auto partial = local_product(x, at::Tensor());  // [B, T, out]: this rank's share of the sum
  // LoRA: A [r, in/tp] is this rank's columns, B [out, r] whole; B (A_i x_i) summed over the ranks is B (A x),
  // so the adapters' term joins the partial output and rides the reduction the base's output makes anyway —
  // no collective of its own (reducing A_i x_i first would add one per layer, forward and backward). The
  // price: each rank's gradient of B is its share of the sum (TensorParallel::finish_gradients adds them).
  if (has_adapters()) {
    const int64_t in = x.size(-1);
    partial = partial + adapters(x, in * tp_->size(), in * tp_->rank());
  }
  auto y = sequence_parallel() ? reduce_scatter_to_sp_region(partial, tp_) : reduce_from_tp_region(partial, tp_);
  // After the reduction, so the bias counts once (not tp times).
  return bias.defined() ? y + bias : y;
}

}  // namespace meshtrain::parallel
