#include "meshtrain/parallel/tp/tp_column_parallel_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/tp/tp_regions.h"

namespace meshtrain::parallel {

ColumnParallelLinearImpl::ColumnParallelLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp,
                                                   SequenceParallelFlag sp)
    : TpLinearImpl(std::move(weight), std::move(bias), std::move(tp), std::move(sp)) {}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  auto in = sequence_parallel() ? gather_from_sp_region(x, tp_) : copy_to_tp_region(x, tp_);  // [B, T, in]
  auto y = local_product(in, bias);  // [B, T, out/tp]; the FP8 product where the weight is held so (serving)
  // LoRA: A [r, in] is whole, B [out/tp, r] this rank's rows, so this is this rank's block of the adapters'
  // output features. The input here is the same on every TP rank (gathered under sequence parallelism), and
  // so is the dropout mask drawn for it.
  return has_adapters() ? y + adapters(in, in.size(-1), 0) : y;
}

}  // namespace meshtrain::parallel
