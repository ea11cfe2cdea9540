// LoraLinear; see lora_linear.h.
#include "meshtrain/model/linear/lora_linear.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace meshtrain::model {

LoraLinearImpl::LoraLinearImpl(int64_t in, int64_t out, bool bias, int64_t rank, double alpha, double dropout,
                               const at::TensorOptions& opts)
    : LinearImpl(in, out, bias, opts), scale_(alpha / static_cast<double>(rank)), dropout_(dropout) {
  add_parameter("lora_A", at::empty({rank, in}, opts), &lora_A);
  add_parameter("lora_B", at::empty({out, rank}, opts), &lora_B);
}

at::Tensor LoraLinearImpl::forward(const at::Tensor& x) {
  auto y = LinearImpl::forward(x);
  // The adapters run in the compute dtype like the base: under autocast both linears are cast; without it a
  // base held in bf16 takes bf16 adapters' weights too (their fp32 master stays with the optimizer).
  const at::Tensor xa = dropout_ > 0.0 && is_training() ? lora_dropout(x, dropout_, x.size(-1), 0) : x;
  auto a = at::linear(xa, lora_A.to(x.scalar_type()));  // [..., r]
  // The adapter's product added to the base's output by its own GEMM (beta 1) with the scale folded into B
  // ([out, r]: tiny): one kernel where the product, its scaling and the add were three passes over [..., out],
  // and the backward's gradient reaches the base's output as it is, unscaled and uncopied.
  const auto b_scaled = (lora_B.to(x.scalar_type()) * scale_).t();  // [r, out]
  const int64_t out = y.size(-1);
  return at::addmm(y.reshape({-1, out}), a.reshape({-1, a.size(-1)}), b_scaled).view(y.sizes());
}

at::Tensor LoraLinearImpl::merged_weight() const {
  at::NoGradGuard no_grad;
  auto delta = at::matmul(lora_B.to(at::kFloat), lora_A.to(at::kFloat)) * scale_;  // [out, in]
  const at::Tensor base = weight_values();  // an NF4 base dequantized (model.base_quant nf4)
  return (base + delta.to(base.device())).to(weight.scalar_type());
}

at::Tensor lora_dropout(const at::Tensor& x, double p, int64_t width, int64_t offset) {
  auto shape = x.sizes().vec();
  shape.back() = width;
  auto keep = at::empty(shape, x.options()).bernoulli_(1.0 - p).narrow(-1, offset, x.size(-1));  // [..., in]
  return x * keep / (1.0 - p);
}

Linear make_linear(const ModelConfig& cfg, LoraTarget target, int64_t in, int64_t out, bool bias,
                   const at::TensorOptions& opts) {
  const auto targets = lora_targets(cfg);
  if (std::find(targets.begin(), targets.end(), target) == targets.end()) return Linear(in, out, bias, opts);
  std::shared_ptr<LinearImpl> lora =
      std::make_shared<LoraLinearImpl>(in, out, bias, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, opts);
  return Linear(std::move(lora));
}

bool is_lora_parameter(const std::string& name) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".lora_A") || ends_with(".lora_B");
}

}  // namespace meshtrain::model
