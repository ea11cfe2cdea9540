// The parameters of the ops that stand in for at::linear (master_linear, bias_linear, fused_linear_gelu,
// gelu_mlp): each takes its weight and bias in their own dtype — fp32 master weights under CUDA autocast —
// casts them to the compute dtype inside its forward (and keeps that copy for the backward, as autocast's
// linear does), and returns their gradients in their own dtype, written so by the kernels that compute them:
// the weight gradient by the GEMM (bf16 × bf16 → fp32 in cuBLASLt), the bias gradient by the column sum. So no
// bf16 gradient is made to be converted by autocast's cast backward afterwards.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

namespace meshtrain::model {

// Whether an op computing in xc's dtype may take parameter p as it is: undefined, or on xc's device and either
// of xc's dtype or an fp32 master under CUDA autocast (which is what at::linear would cast).
bool takes_param(const at::Tensor& p, const at::Tensor& xc);

// p in the compute dtype `dt` (p itself where it already is); undefined stays undefined.
at::Tensor compute_copy(const at::Tensor& p, at::ScalarType dt);

// ∂W = ∂yᵀ·x in `dtype` (x's dtype, or fp32 from 16-bit ∂y and x). dy: [N, out], x: [N, in], both contiguous.
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, at::ScalarType dtype);

// ∂b = Σ_rows ∂y in `dtype` (model/column_sum.h).
at::Tensor bias_grad(const at::Tensor& dy, at::ScalarType dtype);

// What a linear's backward asks for: which parameter gradients, in which dtypes, and whether to try the
// weight-gradient GEMM with the bias gradient in its epilogue (cuBLASLt's BGRADB; train.gemm_epilogues).
struct ParamGrads {
  bool weight = false, bias = false;
  at::ScalarType weight_dtype = at::kFloat, bias_dtype = at::kFloat;
  bool bias_epilogue = false;
};

// {∂W, ∂b}, each undefined where not asked for. With bias_epilogue (both asked for, one dtype) one GEMM where
// cuBLASLt has a kernel for it; otherwise the GEMM and the column sum.
std::pair<at::Tensor, at::Tensor> linear_param_grads(const at::Tensor& dy, const at::Tensor& x,
                                                     const ParamGrads& want);

// The backward of y = x·Wᵀ (+ b) that the linear functions share (master_linear, bias_linear). Their forward
// calls save_linear with its input x [N, in] (contiguous, compute dtype), the compute-dtype copy wc of W it
// multiplied by, and the parameters as given (b empty, [0], where there is none); their backward returns
// linear_backward's {∂x, ∂W, ∂b}, the parameters' gradients in their own dtypes. bias_epilogue: ∂W and ∂b
// from one GEMM where cuBLASLt has a kernel for it (train.gemm_epilogues).
void save_linear(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& wc,
                 const at::Tensor& w, const at::Tensor& b);
torch::autograd::variable_list linear_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& grad_y,
                                               bool bias_epilogue);

}  // namespace meshtrain::model
