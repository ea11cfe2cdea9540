// GPT-2's whole MLP, y = r + gelu_tanh(x·W_fcᵀ + b_fc)·W_projᵀ + b_proj, as one autograd function whose bias,
// GELU and residual work happens inside its GEMMs' cuBLASLt epilogues (model/kernels/lt_matmul.h), where each was
// measured to pay (fused_kernels_bench, mlp_* rows):
//   forward   fc:   GELU_AUX_BIAS — h = gelu(pre) and the pre-activation pre, no GELU kernel of its own
//             proj: BIAS, with C = r: the block's fp32 residual added by the GEMM (as model/linear/residual_linear.h)
//   backward  proj's input gradient: DGELU — ∂pre = (∂y·W_proj) ⊙ gelu'(pre), no GELU backward kernel
//             the weight gradients: plain GEMMs into the masters' fp32; the bias gradients: the column sum
//             (cuBLASLt's BGRADB and DGELU_BGRAD ran slower than the GEMM and the column sum)
// It saves what eager PyTorch saves (x, pre, h). A GEMM that cuBLASLt cannot run with its epilogue (d_ff not a
// multiple of 8, no kernel for the dtype) falls back to its composite ops inside the same function. Without
// gradients fc takes the GELU epilogue without the pre-activation (at::_addmm_activation).
//
// Under CUDA autocast x is cast to the autocast dtype first, as at::linear would cast it; fp32 master weights
// and biases are cast inside the function (the 16-bit weights kept for the backward) and get their gradients
// in fp32 from the kernels (src/model/linear/linear_params.h). r, where given, is fp32 or the compute dtype (others are
// added after the function) and gets ∂y as it is. Elsewhere (CPU, other dtypes, a build without CUDA kernels)
// the composite r + at::linear(at::gelu(at::linear(x, W_fc, b_fc), "tanh"), W_proj, b_proj) runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [..., D], w_fc: [F, D], b_fc: [F], w_proj: [D', F], b_proj: [D'], r: [..., D'] or undefined (no residual)
// → [..., D'] (in r's dtype where r is added in the GEMM). Differentiable w.r.t. all.
at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc, const at::Tensor& w_proj,
                    const at::Tensor& b_proj, const at::Tensor& r = {});

}  // namespace meshtrain::model
