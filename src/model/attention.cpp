// Causal self-attention. Layout: projections produce [B, T, H, hd], transposed to [B, H, T, hd] for SDPA.
#include "meshtrain/model/attention.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/attention_backend.h"
#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/model/rotary.h"
#include "meshtrain/model/linear/shared_input_linears.h"

namespace meshtrain::model {

AttentionImpl::AttentionImpl(const ModelConfig& cfg, const at::TensorOptions& opts)
    : head_dim_(cfg.d_model / cfg.n_head), dropout_(cfg.dropout) {
  const int64_t n_head = cfg.n_head, n_kv_head = cfg.n_kv_head > 0 ? cfg.n_kv_head : cfg.n_head;
  const bool bias = cfg.family == Family::gpt2;
  // A LoraLinear where LoRA adapts the projection (model/linear/lora_linear.h), a Linear otherwise.
  auto lin = [&](LoraTarget t, int64_t in, int64_t out) { return make_linear(cfg, t, in, out, bias, opts); };
  wq = register_module("wq", lin(LoraTarget::q, cfg.d_model, n_head * head_dim_));
  wk = register_module("wk", lin(LoraTarget::k, cfg.d_model, n_kv_head * head_dim_));
  wv = register_module("wv", lin(LoraTarget::v, cfg.d_model, n_kv_head * head_dim_));
  wo = register_module("wo", lin(LoraTarget::o, n_head * head_dim_, cfg.d_model));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  LayerKVCache* cache, const Documents* docs) {
  // Head counts follow the weights: under tensor parallelism wq/wk/wv hold only this rank's heads.
  const int64_t n_head = wq->weight.size(0) / head_dim_, n_kv_head = wk->weight.size(0) / head_dim_;
  // [B, T, H·hd] each; T may differ from x's (sequence parallelism gathers it). One function where the three
  // can share x: their input gradients summed by the GEMMs (model/linear/shared_input_linears.h).
  const auto qkv = forward_shared_input({wq.get(), wk.get(), wv.get()}, x);
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  const int64_t B = q.size(0), T = q.size(1);
  q = q.view({B, T, n_head, head_dim_}).transpose(1, 2);     // [B, H, T, hd]
  k = k.view({B, T, n_kv_head, head_dim_}).transpose(1, 2);  // [B, Hkv, T, hd]
  v = v.view({B, T, n_kv_head, head_dim_}).transpose(1, 2);
  if (cos.defined()) {
    // Packed documents' tables are per row ([B, 1, T, hd]); the fused kernel takes one table for all rows.
    const bool fuse = fused_ && cos.dim() == 2;
    q = fuse ? fused_rope(q, cos, sin) : apply_rope(q, cos, sin);
    k = fuse ? fused_rope(k, cos, sin) : apply_rope(k, cos, sin);
  }
  const double p = is_training() ? dropout_ : 0.0;
  if (docs && docs->packed()) {
    MT_CHECK(!cache, "attention: packed documents with a KV cache");
    auto y = document_attention(q, k, v, *docs, p);
    return wo->forward(y.transpose(1, 2).reshape({B, T, n_head * head_dim_}));
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
  auto y = at::scaled_dot_product_attention(q, k, v, {}, p, causal, std::nullopt,
                                            /*enable_gqa=*/n_kv_head != n_head);  // [B, H, T, hd]
  y = y.transpose(1, 2).reshape({B, T, n_head * head_dim_});
  return wo->forward(y);
}

at::Tensor AttentionImpl::document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const Documents& docs, double dropout) const {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), Hkv = k.size(1), hd = q.size(3);
  const auto dt = q.scalar_type();
  // Flash attention's variable-length kernel where it can run and flash is allowed (train.attention_backend
  // restricts SDPA through the same switch); else the masked SDPA under whichever backend is allowed.
  const bool varlen = varlen_flash_runs(q.device(), dt, hd) && at::globalContext().userEnabledFlashSDP() &&
                      docs.cu_seqlens.defined();
  if (!varlen) {
    const at::Tensor mask = docs.mask.defined() ? docs.mask : block_causal_mask(docs.positions);
    return at::scaled_dot_product_attention(q, k, v, mask, dropout, /*is_causal=*/false, std::nullopt,
                                            /*enable_gqa=*/Hkv != H);
  }
  // [B, H, T, hd] → [B·T, H, hd]: the documents are the segments cu_seqlens marks in the flattened tokens,
  // each causal within itself; flash takes fewer key heads than query heads as they are (GQA).
  auto flat = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({B * T, t.size(1), hd}); };
  const auto cu = docs.cu_seqlens.to(q.device(), at::kInt);
  auto out = std::get<0>(at::_flash_attention_forward(flat(q), flat(k), flat(v), cu, cu, docs.max_len, docs.max_len,
                                                      dropout, /*is_causal=*/true, /*return_debug_mask=*/false));
  return out.view({B, T, H, hd}).transpose(1, 2);  // [B, H, T, hd]
}

}  // namespace meshtrain::model
