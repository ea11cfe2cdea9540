// Rotary embedding (model/rotary.h's apply_rope) fused into one CUDA kernel for forward and one for
// backward: each reads q or k and the fp32 cos/sin tables once and writes the result, in fp32 arithmetic
// with a single rounding. The composite apply_rope spends five elementwise passes forward (negate,
// concatenate, two products, sum) and as many backward, and rounds cos/sin to bf16 first.
//
// Elsewhere (CPU, other dtypes, a CPU-only build) apply_rope runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [B, H, T, hd] (any strides with unit stride along hd — attention passes the transposed view of its
// [B, T, H, hd] projection); cos/sin: [T, hd] (rope_tables) → rotated x, same shape, strides and dtype.
// Differentiable w.r.t. x.
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace meshtrain::model
