#include "meshtrain/model/linear.h"

#include <ATen/ATen.h>

#include "meshtrain/model/fp8_linear.h"

namespace meshtrain::model {

LinearImpl::LinearImpl(int64_t in, int64_t out, bool bias, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({out, in}, opts), &weight);
  if (bias) add_parameter("bias", at::empty({out}, opts), &this->bias);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (fp8_ != Fp8Scaling::off && fp8_applies(x, weight)) return fp8_linear(x, weight, bias, fp8_);
  return at::linear(x, weight, bias);
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({num, dim}, opts), &weight);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

}  // namespace meshtrain::model
