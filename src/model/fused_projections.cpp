// Adjacency is read from the tensors themselves (same storage, each one starting where the previous ends), so no
// state beside the modules says whether a model is fused: a model loaded again, moved, or sharded differently is
// simply found unfused, and its layers run one GEMM each as before.
#include "meshtrain/model/fused_projections.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "meshtrain/model/block.h"
#include "meshtrain/model/linear/fp8_weight.h"

namespace meshtrain::model {
namespace {

// Whether `ts` (all defined, 1-D or 2-D, contiguous, one dtype) follow each other in one storage.
bool projections_adjacent(const std::vector<at::Tensor>& ts) {
  for (size_t i = 1; i < ts.size(); ++i) {
    const at::Tensor &a = ts[i - 1], &b = ts[i];
    if (!b.is_contiguous() || b.scalar_type() != a.scalar_type() || !b.storage().is_alias_of(a.storage()) ||
        b.storage_offset() != a.storage_offset() + a.numel())
      return false;
  }
  return ts.front().is_contiguous();
}

// `ts` laid end to end along dim 0 as one view of their storage.
at::Tensor projections_joined_view(const std::vector<at::Tensor>& ts) {
  int64_t rows = 0;
  for (const auto& t : ts) rows += t.size(0);
  const at::Tensor& t = ts.front();
  // Contiguous rows: a weight [rows, in] has strides {in, 1}, a bias [rows] {1}.
  if (t.dim() == 1) return t.as_strided({rows}, {1});
  return t.as_strided({rows, t.size(1)}, {t.size(1), 1});
}

// Whether the group may be fused: every layer plain, weights [out_i, in] of one width, dtype and device, biases
// all or none.
bool projections_fusable(const std::vector<LinearImpl*>& layers) {
  const at::Tensor& w0 = layers.front()->weight;
  for (const LinearImpl* l : layers) {
    if (!l->plain_in_inference() || l->fp8_weight().defined() || !l->weight.defined() || l->weight.dim() != 2 ||
        l->weight.size(1) != w0.size(1) || l->weight.scalar_type() != w0.scalar_type() ||
        l->weight.device() != w0.device() || l->bias.defined() != layers.front()->bias.defined())
      return false;
    if (l->bias.defined() && (l->bias.scalar_type() != w0.scalar_type() || l->bias.device() != w0.device()))
      return false;
  }
  return true;
}

// Each layer's `name` parameter replaced by its rows of one new buffer holding them all.
void projections_lay_out(const std::vector<LinearImpl*>& layers, const std::string& name) {
  std::vector<at::Tensor> parts;
  for (LinearImpl* l : layers) parts.push_back(name == "weight" ? l->weight : l->bias);
  const at::Tensor joined = at::cat(parts, 0);
  int64_t row = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t n = parts[i].size(0);
    parts[i] = at::Tensor();  // the old tensor's last reference but the module's, released by the swap
    layers[i]->replace_parameter(name, joined.narrow(0, row, n).detach());
    row += n;
  }
}

// Fuses one group; whether side_by_side() finds it.
bool projections_fuse_group(const std::vector<LinearImpl*>& layers) {
  const std::vector<const LinearImpl*> view(layers.begin(), layers.end());
  if (side_by_side(view).found()) return true;
  if (!projections_fusable(layers)) return false;
  projections_lay_out(layers, "weight");
  if (layers.front()->bias.defined()) projections_lay_out(layers, "bias");
  return side_by_side(view).found();
}

// side_by_side() for layers that all hold FP8 weights: their codes and their scales each adjacent.
SideBySide fp8_side_by_side(const std::vector<const LinearImpl*>& layers, const std::vector<at::Tensor>& bs) {
  std::vector<at::Tensor> qs, scales;
  for (const LinearImpl* l : layers) {
    if (!l->plain_in_inference() || !l->fp8_weight().defined()) return {};
    qs.push_back(l->fp8_weight().q);
    scales.push_back(l->fp8_weight().scale);
  }
  if (!projections_adjacent(qs) || !projections_adjacent(scales) || (!bs.empty() && !projections_adjacent(bs)))
    return {};
  return {.bias = bs.empty() ? at::Tensor() : projections_joined_view(bs),
          .fp8 = {projections_joined_view(qs), projections_joined_view(scales)}};
}

}  // namespace

at::Tensor SideBySide::forward(const at::Tensor& x) const {
  return fp8.defined() ? fp8_weight_linear(x, fp8, bias) : at::linear(x, weight, bias);
}

SideBySide side_by_side(const std::vector<const LinearImpl*>& layers) {
  if (layers.size() < 2) return {};
  std::vector<at::Tensor> ws, bs;
  for (const LinearImpl* l : layers) {
    if (l->bias.defined() != layers.front()->bias.defined()) return {};
    if (l->bias.defined()) bs.push_back(l->bias);
  }
  if (layers.front()->fp8_weight().defined()) return fp8_side_by_side(layers, bs);
  for (const LinearImpl* l : layers) {
    if (!l->plain_in_inference() || l->fp8_weight().defined() || !l->weight.defined() || l->weight.dim() != 2)
      return {};
    ws.push_back(l->weight);
  }
  for (const auto& w : ws)
    if (w.size(1) != ws.front().size(1)) return {};
  if (!projections_adjacent(ws) || (!bs.empty() && !projections_adjacent(bs))) return {};
  return {projections_joined_view(ws), bs.empty() ? at::Tensor() : projections_joined_view(bs)};
}

int64_t fuse_projections(TransformerImpl& model) {
  torch::NoGradGuard no_grad;  // the new buffers are plain tensors; replace_parameter restores requires_grad
  int64_t fused = 0;
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    auto& block = *model.blocks->ptr<BlockImpl>(i);
    fused += projections_fuse_group({block.attn->wq.get(), block.attn->wk.get(), block.attn->wv.get()});
    if (block.mlp->swiglu()) fused += projections_fuse_group({block.mlp->gate.get(), block.mlp->up.get()});
  }
  return fused;
}

}  // namespace meshtrain::model
