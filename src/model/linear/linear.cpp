#include "meshtrain/model/linear/linear.h"

#include <ATen/ATen.h>

#include "meshtrain/model/linear/bias_linear.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/linear/fused_linear_gelu.h"
#include "meshtrain/model/linear/master_linear.h"
#include "meshtrain/model/linear/residual_linear.h"

namespace meshtrain::model {

LinearImpl::LinearImpl(int64_t in, int64_t out, bool bias, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({out, in}, opts), &weight);
  if (bias) add_parameter("bias", at::empty({out}, opts), &this->bias);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (fp8_ != Fp8Scaling::off && fp8_applies(x, weight)) return fp8_linear(x, weight, bias, fp8_, fp8_input_.get());
  if (fused_bias_ && bias.defined()) return bias_linear(x, weight, bias);
  if (master_grads_) return master_linear(x, weight, bias);  // at::linear where it does not apply
  return at::linear(x, weight, bias);
}

at::Tensor LinearImpl::forward_gelu(const at::Tensor& x, bool fused) {
  // FP8 matmuls have no GELU epilogue: forward's FP8 path, then the GELU.
  if (fused && bias.defined() && fp8_ == Fp8Scaling::off && can_fuse_gelu())
    return fused_linear_gelu(x, weight, bias);
  return at::gelu(forward(x), "tanh");
}

at::Tensor LinearImpl::forward_residual(const at::Tensor& x, const at::Tensor& r) {
  if (master_grads_ && fused_adds_ && can_fuse() && residual_linear_applies(x, weight, bias, r))
    return residual_linear(x, weight, bias, r);
  return r + forward(x);
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({num, dim}, opts), &weight);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

}  // namespace meshtrain::model
