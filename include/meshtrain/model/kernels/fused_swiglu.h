// SwiGLU's gate, silu(gate)·up, fused into one CUDA kernel forward and one backward that yields both
// gradients from ∂y, gate and up (fp32 arithmetic). Eager PyTorch runs two kernels forward and keeps
// silu(gate) as a third saved activation of the MLP's width; its backward takes three more passes.
//
// Elsewhere (CPU, other dtypes, a CPU-only build) at::silu(gate) * up runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// gate, up: same shape → silu(gate) · up, same shape and dtype (contiguous). Differentiable w.r.t. both. The kernel
// reads contiguous inputs, and also two equally strided row layouts in place — the halves of one [..., 2·F] tensor,
// as the inference path's fused gate and up GEMM gives them; other layouts are made contiguous first.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace meshtrain::model
