// Fused projections for inference (docs/serving.md "Fused projections"): the layers of a block that read the same
// input — attention's q, k and v; SwiGLU's gate and up — computed by ONE GEMM over their weights laid side by side
// in one buffer, instead of one GEMM each. At batch 1 a decode step's GEMMs are bound by reading the weights, and
// small ones (k and v of a GQA model: 8 MB each at Llama 3.1 8B) reach a fraction of the bandwidth a large one
// does; one launch also replaces the split-K reductions of the small ones.
//
// No second copy of the weights: fuse_projections() concatenates a group's weights into one new buffer and makes
// each module's parameter a view of its rows (the old tensors are released), so the modules' own forward, their
// parameter names, shapes and values are unchanged, and side_by_side() finds the fused weight again from the
// views' addresses wherever they are adjacent. The training path never calls it (a trainer's optimizer and
// sharding own the parameters' storage); the serving engine calls it once at load.
//
//   model::fuse_projections(*net);                           // once, before CUDA graphs capture the weights
//   auto w = model::side_by_side({wq, wk, wv});              // [Σ out, in] views, or nothing found
//   if (w.found()) y = w.forward(x);                         // q | k | v along the last dim
//
// Layers whose weights are held in FP8 (model/fp8_weights.h) are found side by side the same way, from their codes
// and scales.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/model/linear/fp8_weight.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

// The weight [Σ out_i, in] of `layers` and their bias [Σ out_i] (undefined where they have none) as single
// tensors, where every layer is plain_in_inference() and their weights (and biases) lie side by side in one
// buffer in this order; or, where every layer holds an FP8 weight and their codes and scales lie so, `fp8`, their
// FP8 weights as one; all undefined elsewhere.
struct SideBySide {
  at::Tensor weight, bias;
  Fp8Weight fp8;

  bool found() const { return weight.defined() || fp8.defined(); }
  // Every layer's forward(x), [..., Σ out_i], by one GEMM. Only where found().
  at::Tensor forward(const at::Tensor& x) const;
};
SideBySide side_by_side(const std::vector<const LinearImpl*>& layers);

// Lays out, in every block, q, k and v's weights (and biases) side by side in one buffer, and SwiGLU's gate and
// up, where every layer of the group is plain_in_inference() and they share dtype, device and input width.
// Groups already side by side stay as they are. Returns the number of groups that side_by_side() now finds.
// The old tensors are released to the allocator (a CUDA caller may return its cache to the device). Call it
// before anything holds the weights' addresses (CUDA graphs).
int64_t fuse_projections(TransformerImpl& model);

}  // namespace meshtrain::model
