// Causal self-attention. Layout: projections produce [B, T, H, hd], transposed to [B, H, T, hd] for SDPA.
#include "meshtrain/model/attention.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/fused_rope.h"
#include "meshtrain/model/rotary.h"

namespace meshtrain::model {

AttentionImpl::AttentionImpl(const ModelConfig& cfg, const at::TensorOptions& opts)
    : head_dim_(cfg.d_model / cfg.n_head), dropout_(cfg.dropout) {
  const int64_t n_head = cfg.n_head, n_kv_head = cfg.n_kv_head > 0 ? cfg.n_kv_head : cfg.n_head;
  const bool bias = cfg.family == "gpt2";
  auto lin = [&](int64_t in, int64_t out) { return Linear(in, out, bias, opts); };
  wq = register_module("wq", lin(cfg.d_model, n_head * head_dim_));
  wk = register_module("wk", lin(cfg.d_model, n_kv_head * head_dim_));
  wv = register_module("wv", lin(cfg.d_model, n_kv_head * head_dim_));
  wo = register_module("wo", lin(n_head * head_dim_, cfg.d_model));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  LayerKVCache* cache) {
  // Head counts follow the weights: under tensor parallelism wq/wk/wv hold only this rank's heads.
  const int64_t n_head = wq->weight.size(0) / head_dim_, n_kv_head = wk->weight.size(0) / head_dim_;
  auto q = wq->forward(x);  // [B, T, H·hd]; T may differ from x's (sequence parallelism gathers it)
  auto k = wk->forward(x);
  auto v = wv->forward(x);
  const int64_t B = q.size(0), T = q.size(1);
  q = q.view({B, T, n_head, head_dim_}).transpose(1, 2);     // [B, H, T, hd]
  k = k.view({B, T, n_kv_head, head_dim_}).transpose(1, 2);  // [B, Hkv, T, hd]
  v = v.view({B, T, n_kv_head, head_dim_}).transpose(1, 2);
  if (cos.defined()) {
    q = fused_ ? fused_rope(q, cos, sin) : apply_rope(q, cos, sin);
    k = fused_ ? fused_rope(k, cos, sin) : apply_rope(k, cos, sin);
  }
  bool causal = true;
  if (cache) {
    MT_CHECK(!cache->k.defined() || T == 1, "KV cache: a multi-token step after the prefill is not supported");
    if (cache->k.defined()) {
      k = at::cat({cache->k, k}, 2);
      v = at::cat({cache->v, v}, 2);
    }
    cache->k = k;
    cache->v = v;
    // One new query attends to every cached key: no mask needed. A multi-token prefill starts empty, so
    // the usual causal mask is right for it.
    causal = T > 1;
  }
  const double p = is_training() ? dropout_ : 0.0;
  auto y = at::scaled_dot_product_attention(q, k, v, {}, p, causal, std::nullopt,
                                            /*enable_gqa=*/n_kv_head != n_head);  // [B, H, T, hd]
  y = y.transpose(1, 2).reshape({B, T, n_head * head_dim_});
  return wo->forward(y);
}

}  // namespace meshtrain::model
