// GPT-2's MLP input layer, y = gelu_tanh(x·Wᵀ + b), with the bias and the GELU taken out of their own
// kernels. Without gradients (evaluation, generation) the matmul applies both in its cuBLASLt epilogue
// (at::_addmm_activation, whose GELU is the tanh approximation GPT-2 uses). For training the backward needs
// the pre-activation, which that epilogue does not return, so the forward keeps the bias in the matmul's
// epilogue (addmm) and runs the GELU as one kernel; the backward's GELU gradient and the bias gradient's
// column sums come out of one fused kernel (fused_gelu.cu), where eager PyTorch reads ∂pre twice.
//
// Under CUDA autocast x is cast to the autocast dtype first, as at::linear would cast it; fp32 master W and b
// are cast inside the function (the bf16 W kept for ∂x) and get their gradients in fp32 straight from the
// kernels: ∂W from the GEMM (bf16 × bf16 → fp32 in cuBLASLt), ∂b from the partial sums' second stage
// (model/kernels/column_sum.h), no cast backward after them. Elsewhere (CPU, other dtypes, a CPU-only build)
// at::gelu(at::linear(x, W, b), "tanh") runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [..., in], weight: [out, in], bias: [out] → [..., out]. Differentiable w.r.t. all three.
at::Tensor fused_linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace meshtrain::model
