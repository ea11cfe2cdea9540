// y = x·Wᵀ + b whose backward takes the bias gradient out of its own reduction: on CUDA the weight-gradient
// GEMM computes it in its cuBLASLt epilogue (BGRADB, model/kernels/lt_matmul.h), where eager PyTorch's at::linear
// runs a separate column sum over ∂y (GPT-2's attention and MLP projections have biases). The forward adds the
// bias in the GEMM's epilogue, as at::linear does.
//
// Under CUDA autocast x is cast to the autocast dtype first, as at::linear would cast it; fp32 master W and b
// are taken as they are and cast inside the function (the bf16 W kept for ∂x), and their gradients come out
// in fp32 from the kernels that compute them (the ∂W GEMM writes fp32, src/model/linear/linear_params.h), with no
// cast backward after them. Without gradients autocast's cached casts of W and b are used. Where cuBLASLt
// has no kernel for a GEMM (model/kernels/lt_matmul.h; BGRADB from bf16 into fp32, for one) that GEMM falls back: the
// forward to at::addmm, the backward to the plain ∂W GEMM and meshtrain's column sum (model/kernels/column_sum.h).
// Elsewhere (CPU, other dtypes, a build without CUDA kernels) at::linear(x, W, b) runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [..., in], weight: [out, in], bias: [out] → [..., out]. Differentiable w.r.t. all three.
at::Tensor bias_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace meshtrain::model
