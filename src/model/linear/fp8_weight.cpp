#include "meshtrain/model/linear/fp8_weight.h"

#include <ATen/ATen.h>

#include <atomic>

#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/kernels/fp8_cast.h"

namespace meshtrain::model {
namespace {

// x2 [M, in] · wᵀ on CUDA: x2 cast to e4m3 per row, the row-scaled FP8 GEMM (bf16 out, in x2's dtype after).
at::Tensor cuda_fp8_product(const at::Tensor& x2, const Fp8Weight& w) {
  const Fp8Cast cx = fp8_cast(x2, Fp8Scaling::rowwise, at::kFloat8_e4m3fn, Fp8Copies::rowmajor);
  // The right operand is wᵀ, column-major, its scales a row [1, out]. Row-scaled FP8 GEMMs write bf16 only.
  auto y = at::_scaled_mm(cx.q, w.q.t(), cx.inv_scale, w.scale.t(), std::nullopt, std::nullopt, at::kBFloat16,
                          /*use_fast_accum=*/true);
  return y.scalar_type() == x2.scalar_type() ? y : y.to(x2.scalar_type());
}

// Whether the GEMM takes a row count that is not a multiple of 16 (a decode batch): -1 not yet known, 0 no,
// 1 yes. PyTorch's checks on the left operand's rows have changed between versions, so the first such call
// finds out; its check runs on the host before any launch, so a refusal leaves nothing half-done.
std::atomic<int> g_any_rows{-1};

at::Tensor fp8_product(const at::Tensor& x2, const Fp8Weight& w) {
  if (x2.is_cuda()) {
    const int64_t rows = x2.size(0), pad = (16 - rows % 16) % 16;
    if (pad == 0) return cuda_fp8_product(x2, w);
    if (g_any_rows.load() != 0) {
      try {
        auto y = cuda_fp8_product(x2, w);
        g_any_rows.store(1);
        return y;
      } catch (const c10::Error&) {
        if (g_any_rows.load() == 1) throw;  // it took such rows before: another failure
        g_any_rows.store(0);
      }
    }
    // Zero rows padded on (their cast is zero codes) and cut off the product.
    return cuda_fp8_product(at::constant_pad_nd(x2, {0, 0, 0, pad}), w).narrow(0, 0, rows);
  }
  // The definition the GEMM computes: the dequantized operands multiplied in fp32.
  const Fp8Cast cx = fp8_cast(x2, Fp8Scaling::rowwise, at::kFloat8_e4m3fn, Fp8Copies::rowmajor);
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
