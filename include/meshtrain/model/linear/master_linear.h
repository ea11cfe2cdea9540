// y = x·Wᵀ (+ b) on fp32 master weights under CUDA autocast, whose weight and bias gradients come out in fp32
// from the kernels that compute them. at::linear under autocast casts W to bf16 (autocast's cached cast), so
// its backward computes ∂W in bf16 and autograd's cast backward converts it to fp32 in a copy kernel of its
// own, once per linear per step (4.3 ms of a 255 ms Llama 3.2 1B step on an H200); its bias gradient is
// ATen's generic column reduction. Here one autograd function takes the fp32 weight itself, casts it for the
// forward matmul and keeps that bf16 copy for the backward (the memory autocast's linear keeps), and in the
// backward cuBLASLt writes ∂W = ∂yᵀ·x from bf16 operands straight into fp32 (model/kernels/lt_matmul.h) and the bias
// gradient is meshtrain's column sum in fp32 (model/kernels/column_sum.h). ∂x is the bf16 GEMM at::linear runs.
//
// It applies (master_linear_applies) on CUDA in a build with MESHTRAIN_CUDA_KERNELS, with autocast on for CUDA
// in bf16 or fp16, the weight (and bias) fp32 on x's device, and a backward to build (grad mode on and x, W or
// b requiring a gradient; a frozen weight gets no ∂W, as LoRA's base). Elsewhere at::linear(x, W, b) runs:
// on the CPU, without autocast, where the weight is already 16-bit (FSDP's param_dtype: ∂W is bf16 either
// way), and without gradients (evaluation, generation), where autocast's cast cache serves repeated forwards.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// Whether master_linear runs its own function for these tensors (see above), rather than at::linear.
bool master_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// x: [..., in], weight: [out, in], bias: [out] or undefined → [..., out] (the autocast dtype where it
// applies). Differentiable w.r.t. all three; the parameters' gradients in their own dtype.
at::Tensor master_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace meshtrain::model
