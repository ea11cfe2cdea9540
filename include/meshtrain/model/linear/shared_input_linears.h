// Several linear layers that read the same input — attention's q, k and v; SwiGLU's gate and up — as one
// autograd function whose backward sums their input gradients inside the GEMMs: ∂x = Σᵢ ∂yᵢ·Wᵢ, every GEMM
// after the first adding into ∂x (beta 1, at::addmm_) instead of autograd adding the separate ∂x's with add
// kernels afterwards (those adds took 0.8 ms of a GPT-2 124M step on an H200, 2.3 ms of Llama 3.2 1B's;
// docs/PERFORMANCE.md). Each layer is otherwise master_linear (model/linear/master_linear.h): its weight cast to the
// compute dtype inside the forward, its ∂W and ∂b in fp32 straight from the GEMM and the column sum.
//
// It applies where every layer can_fuse() (no FP8, no adapter, no tensor-parallel shard), has master_grads()
// and fused_adds() on and master_linear applies to it (CUDA, bf16/fp16 autocast, fp32 master weights on x's
// device, a backward to build), and the layers have biases all or none. Elsewhere each layer's own forward runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "meshtrain/model/linear/linear.h"

namespace meshtrain::model {

// Whether forward_shared_input runs the shared function for these layers and x.
bool shares_input(const std::vector<LinearImpl*>& layers, const at::Tensor& x);

// {layers[i]->forward(x)}: x [..., in] → each [..., out_i], differentiable w.r.t. x and every parameter.
std::vector<at::Tensor> forward_shared_input(const std::vector<LinearImpl*>& layers, const at::Tensor& x);

}  // namespace meshtrain::model
