#include "meshtrain/parallel/tp/tp_linear.h"

#include <ATen/ATen.h>

#include "meshtrain/model/linear/lora_linear.h"

namespace meshtrain::parallel {

TpLinearImpl::TpLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp)
    : LinearImpl(weight.size(1), weight.size(0), bias.defined(), weight.options().device(at::kMeta)),
      tp_(std::move(tp)),
      sp_(std::move(sp)) {
  replace_parameter("weight", std::move(weight));
  if (bias.defined()) replace_parameter("bias", std::move(bias));
}

void TpLinearImpl::add_adapters(at::Tensor a, at::Tensor b, double scale, double dropout) {
  add_parameter("lora_A", std::move(a), &lora_A);
  add_parameter("lora_B", std::move(b), &lora_B);
  lora_scale_ = scale;
  lora_dropout_ = dropout;
}

at::Tensor TpLinearImpl::adapters(const at::Tensor& x, int64_t width, int64_t offset) {
  // In the compute dtype like the base (as model::LoraLinearImpl::forward).
  const bool drop = lora_dropout_ > 0.0 && is_training();
  const at::Tensor xa = drop ? model::lora_dropout(x, lora_dropout_, width, offset) : x;
  auto a = at::linear(xa, lora_A.to(x.scalar_type()));  // [..., r]
  return at::linear(a, lora_B.to(x.scalar_type())) * lora_scale_;
}

}  // namespace meshtrain::parallel
