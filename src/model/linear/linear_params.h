// The parameters of the ops that stand in for at::linear (master_linear, residual_linear, bias_linear,
// fused_linear_gelu, gelu_mlp): each takes its weight and bias in their own dtype — fp32 master weights under
// CUDA autocast — and casts them to the compute dtype inside its forward (and keeps that copy for the backward,
// as autocast's linear does), and returns their gradients in their own dtype, written so by the kernels that
// compute them: the weight gradient by the GEMM (bf16 × bf16 → fp32 in cuBLASLt), the bias gradient by the
// column sum. So no bf16 gradient is made to be converted by autocast's cast backward afterwards.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>
#include <vector>

namespace meshtrain::model {

// Whether an op computing in xc's dtype may take parameter p as it is: undefined, or on xc's device and either
// of xc's dtype or an fp32 master under CUDA autocast (which is what at::linear would cast).
bool takes_param(const at::Tensor& p, const at::Tensor& xc);

// p in the compute dtype `dt` (p itself where it already is); undefined stays undefined.
at::Tensor compute_copy(const at::Tensor& p, at::ScalarType dt);

// x [..., in] as the matrix the GEMMs take: [N, in], contiguous, in x's dtype (callers cast it first).
inline at::Tensor as_rows(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}).contiguous(); }

// The shape of a linear's output for input x: x's sizes with the last one `out`.
std::vector<int64_t> output_shape(const at::Tensor& x, int64_t out);

// b contiguous, or the empty [0] tensor that stands for "no bias" in the linear functions' arguments.
at::Tensor bias_or_none(const at::Tensor& b, const at::Tensor& w);

// r + x·wcᵀ + b, in r's dtype, with the add inside the GEMM (cuBLASLt's C = r) where cuBLASLt has a kernel,
// else the composite. x: [N, in] and wc: [out, in] contiguous in the compute dtype; b: [out] in r's dtype, or
// [0] for none; r: [N, out] contiguous.
at::Tensor add_product(const at::Tensor& x, const at::Tensor& wc, const at::Tensor& b, const at::Tensor& r);

// ∂W = ∂yᵀ·x in `dtype` (x's dtype, or fp32 from 16-bit ∂y and x). dy: [N, out], x: [N, in], both contiguous.
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, at::ScalarType dtype);

// ∂b = Σ_rows ∂y in `dtype` (model/kernels/column_sum.h).
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
