#include "meshtrain/parallel/tp_linear.h"

#include <ATen/ATen.h>

namespace meshtrain::parallel {

TpLinearImpl::TpLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp)
    : LinearImpl(weight.size(1), weight.size(0), bias.defined(), weight.options().device(at::kMeta)),
      tp_(std::move(tp)),
      sp_(std::move(sp)) {
  replace_parameter("weight", std::move(weight));
  if (bias.defined()) replace_parameter("bias", std::move(bias));
}

}  // namespace meshtrain::parallel
