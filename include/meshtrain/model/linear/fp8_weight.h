// An FP8 weight for inference (docs/serving.md "FP8 weights"): a frozen linear weight w [out, in] held as e4m3 codes
// with one fp32 scale per output row, w ≈ q · scale, read by a GEMM that takes its input cast to e4m3 per row at the
// moment of the product (dynamic: each token's row scaled from its own largest value, no calibration).
// A decode step is bound by reading the weights, and this halves the bytes a bf16 weight takes.
//
//   Fp8Weight w = quantize_fp8_weight(lin->weight);     // [out, in] bf16/fp32 → codes + row scales
//   auto y = fp8_weight_linear(x, w, bias);             // x [..., in] → [..., out] in x's dtype
//
// On CUDA the product is at::_scaled_mm with row scales (both operands e4m3, fp32 accumulation with the fast
// accumulation inference uses); elsewhere the same maths by composite ops — the dequantized operands multiplied —
// which defines the result the GPU approximates. No gradient flows through either: inference only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace meshtrain::model {

struct Fp8Weight {
  at::Tensor q;      // [out, in] float8_e4m3fn
  at::Tensor scale;  // [out, 1] fp32: row r is q[r] · scale[r]

  bool defined() const { return q.defined(); }
  int64_t bytes() const { return q.numel() * q.element_size() + scale.numel() * scale.element_size(); }
  // Rows [start, start + n) of this weight: views of its codes and scales.
  Fp8Weight rows(int64_t start, int64_t n) const { return {q.narrow(0, start, n), scale.narrow(0, start, n)}; }
  // The weight's values, q · scale, in `dtype`.
  at::Tensor dequantize(at::ScalarType dtype) const;
};

// w [out, in] (any float dtype, in a multiple of 16 wide) → e4m3 codes scaled per row so that the row's largest
// absolute value lands on e4m3's largest (448).
Fp8Weight quantize_fp8_weight(const at::Tensor& w);

// x [..., in] · wᵀ + bias (bias [out] or undefined) in x's dtype, x cast to e4m3 per row. Without gradients.
at::Tensor fp8_weight_linear(const at::Tensor& x, const Fp8Weight& w, const at::Tensor& bias);

}  // namespace meshtrain::model
