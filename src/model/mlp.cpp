#include "meshtrain/model/mlp.h"

#include <ATen/ATen.h>

#include "meshtrain/model/kernels/fused_swiglu.h"
#include "meshtrain/model/linear/gelu_mlp.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/model/linear/shared_input_linears.h"

namespace meshtrain::model {

MlpImpl::MlpImpl(const ModelConfig& cfg, const at::TensorOptions& opts) : swiglu_(cfg.family == Family::llama) {
  const bool bias = !swiglu_;
  // A LoraLinear where LoRA adapts the projection (model/linear/lora_linear.h; llama only), a Linear otherwise.
  auto lin = [&](LoraTarget t, int64_t in, int64_t out) { return make_linear(cfg, t, in, out, bias, opts); };
  if (swiglu_) {
    gate = register_module("w1", lin(LoraTarget::gate, cfg.d_model, cfg.d_ff));
    down = register_module("w2", lin(LoraTarget::down, cfg.d_ff, cfg.d_model));
    up = register_module("w3", lin(LoraTarget::up, cfg.d_model, cfg.d_ff));
  } else {
    up = register_module("fc", Linear(cfg.d_model, cfg.d_ff, bias, opts));
    down = register_module("proj", Linear(cfg.d_ff, cfg.d_model, bias, opts));
  }
}

bool MlpImpl::one_function() const {
  return !swiglu_ && epilogues_ && fused_gelu_ && up->can_fuse() && down->can_fuse() && up->bias.defined() &&
         down->bias.defined();
}

at::Tensor MlpImpl::hidden(const at::Tensor& x) {
  if (swiglu_) {
    const auto gu = forward_shared_input({gate.get(), up.get()}, x);  // input gradients summed by the GEMMs
    return fused_ ? fused_swiglu(gu[0], gu[1]) : at::silu(gu[0]) * gu[1];
  }
  return up->forward_gelu(x, fused_gelu_);
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  if (one_function()) return gelu_mlp(x, up->weight, up->bias, down->weight, down->bias);
  return down->forward(hidden(x));
}

at::Tensor MlpImpl::forward_residual(const at::Tensor& x, const at::Tensor& r) {
  if (one_function()) return gelu_mlp(x, up->weight, up->bias, down->weight, down->bias, r);
  return down->forward_residual(hidden(x), r);
}

}  // namespace meshtrain::model
