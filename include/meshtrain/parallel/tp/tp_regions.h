// Tensor-parallel regions: the collectives where activations enter and leave a tensor-parallel (TP) region,
// each a custom autograd function whose backward is the forward's transpose (Megatron-LM's mappings.py).
// Named by the transition, forward/backward pairs side by side:
//
//   function                      forward                           backward
//   copy_to_tp_region             identity                          all-reduce (sum)
//   reduce_from_tp_region         all-reduce (sum)                  identity
//   scatter_to_tp_region          split the last dim, keep mine     all-gather the last dim
//   gather_from_tp_region         all-gather the last dim           split the last dim, keep mine
//   scatter_to_sp_region          split the sequence dim            all-gather the sequence dim
//   reduce_scatter_to_sp_region   reduce-scatter the sequence dim   all-gather the sequence dim
//   gather_from_sp_region         all-gather the sequence dim       reduce-scatter the sequence dim
//
// "Last dim" splits are equal chunks (size divisible by the group size). The sequence dim is dim 1 of
// [B, T, D] activations (sequence parallelism: the residual stream between TP regions holds T / tp tokens
// per rank); T must be divisible by the group size, a UserError otherwise. Every rank of `tp` must call the
// same functions in the same order (they are collectives, in forward and in backward).
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

at::Tensor copy_to_tp_region(const at::Tensor& x, const comm::CommPtr& tp);
at::Tensor reduce_from_tp_region(const at::Tensor& x, const comm::CommPtr& tp);
at::Tensor scatter_to_tp_region(const at::Tensor& x, const comm::CommPtr& tp);
at::Tensor gather_from_tp_region(const at::Tensor& x, const comm::CommPtr& tp);

at::Tensor scatter_to_sp_region(const at::Tensor& x, const comm::CommPtr& tp);
at::Tensor reduce_scatter_to_sp_region(const at::Tensor& x, const comm::CommPtr& tp);
at::Tensor gather_from_sp_region(const at::Tensor& x, const comm::CommPtr& tp);

// The sequence dim of activations under sequence parallelism.
inline constexpr int64_t kSeqDim = 1;

}  // namespace meshtrain::parallel
