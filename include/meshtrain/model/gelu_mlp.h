// GPT-2's whole MLP, y = gelu_tanh(x·W_fcᵀ + b_fc)·W_projᵀ + b_proj, as one autograd function whose bias,
// GELU and bias-gradient work happens inside the four GEMMs' cuBLASLt epilogues (model/lt_matmul.h):
//   forward   fc:   GELU_AUX_BIAS — h = gelu(pre) and the pre-activation pre, no GELU kernel of its own
//             proj: BIAS
//   backward  proj's weight gradient: BGRADB — ∂W_proj = ∂yᵀ·h with ∂b_proj = Σ ∂y
//             proj's input gradient:  DGELU_BGRAD — ∂pre = (∂y·W_proj) ⊙ gelu'(pre) with ∂b_fc = Σ ∂pre
//             fc's gradients: plain GEMMs (∂W_fc = ∂preᵀ·x, ∂x = ∂pre·W_fc)
// so neither a GELU kernel nor a bias-gradient reduction runs apart from the GEMMs. It saves what eager
// PyTorch saves (x, pre, h). A GEMM that cuBLASLt cannot run with its epilogue (d_ff not a multiple of 8, no
// kernel for the dtype) falls back to its composite ops inside the same function. Without gradients fc takes
// the GELU epilogue without the pre-activation (at::_addmm_activation).
//
// Under CUDA autocast x is cast to the autocast dtype first, as at::linear would cast it; fp32 master weights
// and biases are cast inside the function (the 16-bit weights kept for the backward) and get their gradients
// in fp32 from the kernels: both ∂W GEMMs write fp32 (src/model/linear_params.h), proj's ∂b comes from
// BGRADB into fp32 or, where cuBLASLt has no such kernel, meshtrain's column sum; fc's ∂b from DGELU_BGRAD
// in bf16 (a [F] vector cast) or the column sum. Without gradients autocast's cached casts are used.
// Elsewhere (CPU, other dtypes, a build without CUDA kernels) the composite
// at::linear(at::gelu(at::linear(x, W_fc, b_fc), "tanh"), W_proj, b_proj) runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [..., D], w_fc: [F, D], b_fc: [F], w_proj: [D', F], b_proj: [D'] → [..., D']. Differentiable w.r.t. all.
at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc, const at::Tensor& w_proj,
                    const at::Tensor& b_proj);

}  // namespace meshtrain::model
