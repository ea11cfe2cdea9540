// y = x·Wᵀ + b whose backward takes the bias gradient out of its own reduction: on CUDA the weight-gradient
// GEMM computes it in its cuBLASLt epilogue (BGRADB, model/lt_matmul.h), where eager PyTorch's at::linear
// runs a separate column sum over ∂y (GPT-2's attention and MLP projections have biases). The forward adds the
// bias in the GEMM's epilogue, as at::linear does.
//
// Under CUDA autocast x, W and b are cast to the autocast dtype first, as at::linear would cast them. Where
// cuBLASLt has no kernel for a GEMM (model/lt_matmul.h) that GEMM falls back to at::addmm / at::mm + a sum.
// Elsewhere (CPU, other dtypes, a build without CUDA kernels) at::linear(x, W, b) runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [..., in], weight: [out, in], bias: [out] → [..., out]. Differentiable w.r.t. all three.
at::Tensor bias_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace meshtrain::model
