// Causal self-attention with grouped-query heads (n_kv_head ≤ n_head), RoPE (llama) or none (gpt2, which
// uses learned positions), through at::scaled_dot_product_attention (flash / cuDNN kernels on CUDA).
#pragma once

#include <torch/nn/module.h>

#include "meshtrain/core/config.h"
#include "meshtrain/model/documents.h"
#include "meshtrain/model/kv_cache.h"
#include "meshtrain/model/linear/linear.h"

namespace meshtrain::model {

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& cfg, const at::TensorOptions& opts);
  // x: [B, T, D]; cos/sin: [T, hd], or [B, 1, T, hd] for packed documents (undefined without RoPE); cache:
  // optional, appended to (generation); docs: packed documents (block-causal attention), not with a cache.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     LayerKVCache* cache = nullptr, const Documents* docs = nullptr);
  // RoPE through the fused CUDA kernel where it applies (model/kernels/fused_rope.h; default), else apply_rope.
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }

  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  int64_t head_dim_;  // head counts are not kept: they follow wq/wk's rows (tensor parallelism shards them)
  double dropout_;
  bool fused_ = true;

  // Attention within each packed document: q [B, H, T, hd], k/v [B, Hkv, T, hd] → [B, H, T, hd].
  at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const Documents& docs, double dropout) const;
};
TORCH_MODULE(Attention);

}  // namespace meshtrain::model
