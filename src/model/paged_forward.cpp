// The paged inference step: the blocks' own modules in the order BlockImpl::forward runs them (without dropout),
// with attention's cache and SDPA replaced by the paged cache. Rows are tokens: the batch is [1, N, D].
#include "meshtrain/model/paged_forward.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/kernels/fused_swiglu.h"
#include "meshtrain/model/linear/shared_input_linears.h"
#include "meshtrain/model/paged_attention.h"
#include "meshtrain/model/rotary.h"

namespace meshtrain::model {
namespace {

// Each layer's output of `layers` for x: one GEMM over their weights where they lie side by side
// (model/fused_projections.h; its output split along the last dim into views), else each layer's own forward.
std::vector<at::Tensor> paged_projections(const std::vector<LinearImpl*>& layers, const at::Tensor& x) {
  const SideBySide fused = side_by_side({layers.begin(), layers.end()});
  if (!fused.weight.defined()) return forward_shared_input(layers, x);
  const auto y = at::linear(x, fused.weight, fused.bias);  // [..., Σ out]
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (const LinearImpl* l : layers) {
    out.push_back(y.narrow(-1, at, l->weight.size(0)));
    at += l->weight.size(0);
  }
  return out;
}

// AttentionImpl::forward's projections and RoPE, then the paged cache's write and read. x: [1, N, D].
at::Tensor paged_attention_layer(AttentionImpl& attn, const at::Tensor& x, const at::Tensor& cos,
                                 const at::Tensor& sin, PagedLayerCache& cache, const PagedBatch& batch,
                                 int64_t hd) {
  const int64_t n_head = attn.wq->weight.size(0) / hd, n_kv_head = attn.wk->weight.size(0) / hd;
  const auto qkv = paged_projections({attn.wq.get(), attn.wk.get(), attn.wv.get()}, x);
  const int64_t N = x.size(1);
  auto q = qkv[0].view({1, N, n_head, hd}).transpose(1, 2);  // [1, H, N, hd]
  auto k = qkv[1].view({1, N, n_kv_head, hd}).transpose(1, 2);
  if (cos.defined()) {
    q = attn.fused() ? fused_rope(q, cos, sin) : apply_rope(q, cos, sin);
    k = attn.fused() ? fused_rope(k, cos, sin) : apply_rope(k, cos, sin);
  }
  write_paged_kv(cache, k.squeeze(0).transpose(0, 1), qkv[2].view({N, n_kv_head, hd}), batch);
  auto y = paged_attention(q.squeeze(0).transpose(0, 1), cache, batch);  // [N, H, hd]
  return attn.wo->forward(y.reshape({1, N, n_head * hd}));
}

// BlockImpl::forward without dropout, attention paged.
at::Tensor paged_block(BlockImpl& block, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       PagedLayerCache& cache, const PagedBatch& batch, int64_t hd) {
  auto [xs, y] = block.attn_norm->pass_forward(x);
  auto a = paged_attention_layer(*block.attn, y, cos, sin, cache, batch, hd);
  auto [h, n] = block.mlp_norm->add_forward(xs, a);
  MlpImpl& mlp = *block.mlp;
  if (!mlp.swiglu() || !side_by_side({mlp.gate.get(), mlp.up.get()}).weight.defined())
    return mlp.forward_residual(n, h);
  // MlpImpl's SwiGLU with gate and up in one GEMM; the down projection and the residual add as forward_residual.
  const auto gu = paged_projections({mlp.gate.get(), mlp.up.get()}, n);
  const auto hidden = mlp.fused() ? fused_swiglu(gu[0], gu[1]) : at::silu(gu[0]) * gu[1];
  return mlp.down->forward_residual(hidden, h);
}

}  // namespace

std::vector<PagedLayerCache> make_paged_cache(const TransformerImpl& model, int64_t num_blocks, int64_t block_size) {
  const ModelConfig& cfg = model.config();
  MT_CHECK(model.blocks->size() > 0, "make_paged_cache: a model without blocks");
  const int64_t hd = cfg.d_model / cfg.n_head;
  const auto& wk = model.blocks->ptr<BlockImpl>(0)->attn->wk->weight;  // this rank's key heads, dtype, device
  std::vector<PagedLayerCache> cache(model.blocks->size());
  for (auto& layer : cache) {
    layer.k = at::zeros({num_blocks, block_size, wk.size(0) / hd, hd}, wk.options().requires_grad(false));
    layer.v = at::zeros_like(layer.k);
  }
  return cache;
}

at::Tensor paged_logits(TransformerImpl& model, const PagedBatch& batch, std::vector<PagedLayerCache>& cache) {
  const ModelConfig& cfg = model.config();
  MT_CHECK(model.span().embed && model.span().head && model.blocks->size() == static_cast<size_t>(cfg.n_layer),
           "paged_logits needs the whole model (this module holds a pipeline stage)");
  MT_CHECK(cache.size() == model.blocks->size(), "paged_logits: ", cache.size(), " cache layers for ",
           model.blocks->size(), " blocks");
  for (const PagedChunk& c : batch.chunks)
    MT_CHECK(c.context_len <= cfg.max_seq_len, "sequence of ", c.context_len,
             " tokens exceeds model.max_seq_len ", cfg.max_seq_len);
  torch::NoGradGuard no_grad;
  const int64_t hd = cfg.d_model / cfg.n_head;
  const auto buffers = model.named_buffers(/*recurse=*/false);
  const at::Tensor* inv_freq = buffers.find("inv_freq");  // RoPE (llama)
  auto x = model.tok_embed->forward(batch.tokens);  // [N, D]
  at::Tensor cos, sin;
  if (model.pos_embed) {
    x = x + model.pos_embed->forward(batch.positions);
  } else if (inv_freq) {
    // rope_tables' values at each token's position: the same fp32 products as the contiguous tables.
    auto freqs = at::outer(batch.positions.to(inv_freq->options()), *inv_freq);  // [N, hd/2]
    auto emb = at::cat({freqs, freqs}, -1);
    cos = emb.cos();
    sin = emb.sin();
  }
  x = x.unsqueeze(0);  // [1, N, D]: the blocks' layout, one row of N tokens
  for (size_t i = 0; i < model.blocks->size(); ++i)
    x = paged_block(*model.blocks->ptr<BlockImpl>(i), x, cos, sin, cache[i], batch, hd);
  auto h = model.final_norm->forward(x).squeeze(0).index_select(0, batch.sample_rows);  // [S, D]
  return model.head_logits(h).to(at::kFloat);  // under tensor parallelism: every rank's vocabulary rows gathered
}

}  // namespace meshtrain::model
