#include "meshtrain/model/fp8_weights.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "meshtrain/model/block.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/linear/fp8_linear.h"

namespace meshtrain::model {
namespace {

// Whether FP8 takes this layer: its product is x·Wᵀ + b on a plain weight, and the FP8 GEMM takes the sizes.
bool fp8_takes(const LinearImpl& l) {
  return l.can_hold_fp8() && l.weight.defined() && l.weight.dim() == 2 && l.weight.size(0) % 16 == 0 &&
         l.weight.size(1) % 16 == 0;
}

// Whether `layers` can share one FP8 buffer: each taken, of one input width, dtype and device.
bool one_buffer(const std::vector<LinearImpl*>& layers) {
  const at::Tensor& w0 = layers.front()->weight;
  for (const LinearImpl* l : layers)
    if (!fp8_takes(*l) || l->weight.size(1) != w0.size(1) || l->weight.scalar_type() != w0.scalar_type() ||
        l->weight.device() != w0.device())
      return false;
  return true;
}

// The layers' weights quantized as one [Σ out, in] tensor (per row, so each layer's rows are what quantizing it
// alone gives), each layer holding its rows of it.
void hold_group(const std::vector<LinearImpl*>& layers, Fp8WeightsSummary& s) {
  std::vector<const LinearImpl*> view(layers.begin(), layers.end());
  // One layer's own weight, or a group already in one buffer (fuse_projections): no copy.
  at::Tensor joined = layers.size() == 1 ? layers.front()->weight : side_by_side(view).weight;
  if (!joined.defined()) {
    std::vector<at::Tensor> ws;
    for (const LinearImpl* l : layers) ws.push_back(l->weight);
    joined = at::cat(ws, 0);
  }
  const Fp8Weight q = quantize_fp8_weight(joined);
  joined = at::Tensor();
  int64_t row = 0;
  for (LinearImpl* l : layers) {
    const int64_t n = l->weight.size(0);
    s.bytes_before += l->weight.numel() * l->weight.element_size();
    l->hold_weight_as_fp8(q.rows(row, n));
    s.bytes_after += l->fp8_weight().bytes();
    s.layers += 1;
    row += n;
  }
}

// One group of layers that read one input (or a single layer): one buffer where it can, else each on its own.
void hold_layers(const std::vector<LinearImpl*>& layers, Fp8WeightsSummary& s) {
  if (one_buffer(layers)) return hold_group(layers, s);
  for (LinearImpl* l : layers)
    if (fp8_takes(*l)) hold_group({l}, s);
}

}  // namespace

Fp8WeightsSummary hold_weights_in_fp8(TransformerImpl& model) {
  const torch::NoGradGuard no_grad;
  Fp8WeightsSummary s;
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    auto& block = *model.blocks->ptr<BlockImpl>(i);
    AttentionImpl& attn = *block.attn;
    MlpImpl& mlp = *block.mlp;
    hold_layers({attn.wq.get(), attn.wk.get(), attn.wv.get()}, s);
    hold_layers({attn.wo.get()}, s);
    if (mlp.swiglu())
      hold_layers({mlp.gate.get(), mlp.up.get()}, s);
    else
      hold_layers({mlp.up.get()}, s);
    hold_layers({mlp.down.get()}, s);
  }
  return s;
}

std::string fp8_weights_refusal(const TransformerImpl& model) {
  const auto device = model.head_weight().device();
  if (device.is_cuda() && !fp8_matmul_available(device))
    return "this GPU has no FP8 matmuls (compute capability 8.9 or newer: L4, L40S, H100, H200, B200)";
  bool any = false;
  for (size_t i = 0; i < model.blocks->size() && !any; ++i)
    for (const auto& m : model.blocks->ptr<BlockImpl>(i)->modules(/*include_self=*/false))
      if (const auto* l = dynamic_cast<const LinearImpl*>(m.get()); l != nullptr && fp8_takes(*l)) any = true;
  if (!any)
    return "no linear layer of the blocks computes x·Wᵀ + b on a plain weight with sizes that are multiples of 16 "
           "(adapters and NF4 keep their own matmuls)";
  return "";
}

}  // namespace meshtrain::model
