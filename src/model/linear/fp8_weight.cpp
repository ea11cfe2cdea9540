#include "meshtrain/model/linear/fp8_weight.h"

#include <ATen/ATen.h>

#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/kernels/fp8_cast.h"

namespace meshtrain::model {
namespace {

// x2 [M, in] (contiguous) · wᵀ in x2's dtype, both operands e4m3 scaled per row.
at::Tensor fp8_product(const at::Tensor& x2, const Fp8Weight& w) {
  const Fp8Cast cx = fp8_cast(x2, Fp8Scaling::rowwise, at::kFloat8_e4m3fn, Fp8Copies::rowmajor);
  if (x2.is_cuda()) {
    // Row-scaled FP8 GEMMs write bf16 only; the right operand is wᵀ, column-major, its scales a row [1, out].
    auto y = at::_scaled_mm(cx.q, w.q.t(), cx.inv_scale, w.scale.t(), std::nullopt, std::nullopt, at::kBFloat16,
                            /*use_fast_accum=*/true);
    return y.scalar_type() == x2.scalar_type() ? y : y.to(x2.scalar_type());
  }
  // The definition the GEMM computes: the dequantized operands multiplied in fp32.
  const auto xd = cx.q.to(at::kFloat) * cx.inv_scale;
  return at::mm(xd, w.dequantize(at::kFloat).t()).to(x2.scalar_type());
}

}  // namespace

at::Tensor Fp8Weight::dequantize(at::ScalarType dtype) const { return (q.to(at::kFloat) * scale).to(dtype); }

Fp8Weight quantize_fp8_weight(const at::Tensor& w) {
  MT_CHECK(w.dim() == 2 && w.size(1) % 16 == 0, "quantize_fp8_weight: w [out, in] with in a multiple of 16; got ",
           w.sizes());
  const Fp8Cast c = fp8_cast(w.detach().contiguous(), Fp8Scaling::rowwise, at::kFloat8_e4m3fn, Fp8Copies::rowmajor);
  return {c.q, c.inv_scale};
}

at::Tensor fp8_weight_linear(const at::Tensor& x, const Fp8Weight& w, const at::Tensor& bias) {
  MT_CHECK(w.defined() && x.size(-1) == w.q.size(1), "fp8_weight_linear: x [..., ", w.q.size(1), "] expected; got ",
           x.sizes());
  const at::NoGradGuard no_grad;
  const auto x2 = as_rows(x);
  auto y = x2.size(0) == 0 ? at::empty({0, w.q.size(0)}, x.options()) : fp8_product(x2, w);
  if (bias.defined()) y.add_(bias.to(y.scalar_type()));
  return y.view(output_shape(x, w.q.size(0)));
}

}  // namespace meshtrain::model
