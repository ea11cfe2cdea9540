// The residual add and the pre-norm that follows it, h = x + r and y = norm(h), fused on CUDA into one
// kernel forward (reads x and r once, writes h and y) and one backward pass that yields ∂x = ∂r from ∂y and
// ∂h together, plus a two-stage reduction for ∂γ (and ∂β). Eager PyTorch runs the add and the norm as
// separate kernels and adds the norm's input gradient to ∂h in a third. fused_norm is the same without the
// add (the norms that follow no add of their own).
//
// Under CUDA autocast y comes out in the autocast dtype (bf16): it only feeds linear layers, which would
// cast it there anyway; the composite gives fp32 (autocast runs norms in fp32), so the values are the same
// up to that one rounding. Elsewhere (CPU, dtypes other than fp32/bf16, a CPU-only build) the composite
// x + r, then at::layer_norm / at::rms_norm, runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "meshtrain/model/table_rows.h"

namespace meshtrain::model {

// x, r: [..., D] alike (fp32 or bf16 each); weight: [D]; bias: [D], or undefined for RMSNorm (rms = true).
// → {h = x + r (PyTorch's promoted dtype), y = norm(h)·weight (+ bias)}. Differentiable w.r.t. all tensors.
std::pair<at::Tensor, at::Tensor> fused_add_norm(const at::Tensor& x, const at::Tensor& r, const at::Tensor& weight,
                                                 const at::Tensor& bias, bool rms, double eps);

// x: [..., D] (fp32 or bf16) → norm(x)·weight (+ bias), in x's dtype or, under CUDA autocast, autocast's.
at::Tensor fused_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool rms, double eps);

// {x, fused_norm(x, ...)} for an x that is also used unnormalised (a block's input: the norm and the residual
// add read it). The first is x's values on a new autograd edge: the backward adds its gradient to the norm's
// input gradient in the norm's own kernel, where autograd would sum the two gradients of x in another.
// `rows`, where given, says x is at::embedding(rows->table, rows->ids): the fused kernel's backward then gathers
// those rows again rather than keeping x from the forward to the backward (the composite norm ignores it).
std::pair<at::Tensor, at::Tensor> fused_norm_pass(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                                  bool rms, double eps, const TableRows* rows = nullptr);

}  // namespace meshtrain::model
