#include "meshtrain/model/block.h"

#include <ATen/ATen.h>

namespace meshtrain::model {

BlockImpl::BlockImpl(const ModelConfig& cfg, const at::TensorOptions& opts) : dropout_(cfg.dropout) {
  const bool rms = cfg.family == Family::llama;
  attn_norm = register_module("attn_norm", Norm(rms, cfg.d_model, cfg.norm_eps, opts));
  attn = register_module("attn", Attention(cfg, opts));
  mlp_norm = register_module("mlp_norm", Norm(rms, cfg.d_model, cfg.norm_eps, opts));
  mlp = register_module("mlp", Mlp(cfg, opts));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              LayerKVCache* cache, const Documents* docs, const TableRows* x_rows) {
  const bool drop = is_training() && dropout_ > 0;
  // x feeds attn_norm and the residual add: through pass_forward, the backward sums its two gradients inside
  // attn_norm's kernel.
  auto [xs, y] = attn_norm->pass_forward(x, x_rows);
  auto a = attn->forward(y, cos, sin, cache, docs);
  // The residual add and mlp_norm in one step (one fused kernel on CUDA): h = x + a, n = mlp_norm(h).
  auto [h, n] = mlp_norm->add_forward(xs, drop ? at::dropout(a, dropout_, true) : a);
  // Without dropout the residual add is the MLP's last GEMM's (MlpImpl::forward_residual).
  if (!drop) return mlp->forward_residual(n, h);
  return h + at::dropout(mlp->forward(n), dropout_, true);
}

}  // namespace meshtrain::model
