// LayerNorm / RMSNorm, alone or after the residual add: our fused kernels where they apply, else ATen's.
#include "meshtrain/model/norm.h"

#include <ATen/ATen.h>

#include "meshtrain/model/kernels/fused_add_norm.h"

namespace meshtrain::model {

NormImpl::NormImpl(bool rms, int64_t dim, double eps, const at::TensorOptions& opts)
    : rms_(rms), dim_(dim), eps_(eps) {
  add_parameter("weight", at::empty({dim}, opts), &weight);
  if (!rms) add_parameter("bias", at::empty({dim}, opts), &bias);
}

at::Tensor NormImpl::forward(const at::Tensor& x) {
  if (fused_) return fused_norm(x, weight, bias, rms_, eps_);
  if (rms_) return at::rms_norm(x, {dim_}, weight, eps_);
  return at::layer_norm(x, {dim_}, weight, bias, eps_);
}

std::pair<at::Tensor, at::Tensor> NormImpl::pass_forward(const at::Tensor& x, const TableRows* rows) {
  if (fused_) return fused_norm_pass(x, weight, bias, rms_, eps_, rows);
  return {x, forward(x)};
}

std::pair<at::Tensor, at::Tensor> NormImpl::add_forward(const at::Tensor& x, const at::Tensor& r) {
  if (fused_) return fused_add_norm(x, r, weight, bias, rms_, eps_);
  auto h = x + r;
  return {h, forward(h)};
}

}  // namespace meshtrain::model
