// y = r + x·Wᵀ (+ b): a projection added to the fp32 residual stream r, with the add inside the GEMM (cuBLASLt's
// C = r, beta 1; model/kernels/lt_matmul.h) instead of an add kernel after it. In a block the MLP's last projection
// ends in `h + mlp(…)`: bf16 m written, then read again with h to write the fp32 sum (10 bytes an element).
// Here the GEMM writes the fp32 sum once, reading h as its C (8 bytes, one kernel fewer; the add kernel took
// 1.2 ms of a GPT-2 124M step on an H200, 2.1 ms of Llama 3.2 1B's: docs/PERFORMANCE.md).
//
// It applies where master_linear does (model/linear/master_linear.h: CUDA, bf16/fp16 autocast, fp32 master weight and
// bias on x's device, a backward to build) and r is fp32 of the output's shape on that device. The backward
// is master_linear's — ∂W and ∂b in fp32 from the GEMM and the column sum — on ∂y cast once to the compute
// dtype, and ∂r = ∂y. Elsewhere: r + at::linear(x, W, b) (the composite).
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// Whether residual_linear runs its own function for these tensors, rather than the composite.
bool residual_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                             const at::Tensor& r);

// x: [..., in], weight: [out, in], bias: [out] or undefined, r: [..., out] → r + x·Wᵀ + b, [..., out] in r's
// dtype where it applies. Differentiable w.r.t. all four.
at::Tensor residual_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& r);

}  // namespace meshtrain::model
