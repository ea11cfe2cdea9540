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

// RoPE on x [1, heads, N, hd] as AttentionImpl::forward applies it (the fused kernel or the reference).
at::Tensor paged_rope(const AttentionImpl& attn, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!cos.defined()) return x;
  return attn.fused() ? fused_rope(x, cos, sin) : apply_rope(x, cos, sin);
}

// AttentionImpl::forward's projections and RoPE, then the paged cache's write: q [N, H, hd] for the attention.
// Where q, k and v lie side by side (model/fused_projections.h) one GEMM gives all three; on CUDA one kernel then
// rotates q and k and writes k and v into the cache (rotate_and_write_paged_kv), else q and k, adjacent heads of
// the output, are rotated by one RoPE call (RoPE works per head and position, so this is the two calls' result).
at::Tensor paged_qkv_into_cache(AttentionImpl& attn, const at::Tensor& x, const at::Tensor& cos,
                                const at::Tensor& sin, PagedLayerCache& cache, const PagedBatch& batch,
                                int64_t hd) {
  const int64_t n_head = attn.wq->weight.size(0) / hd, n_kv_head = attn.wk->weight.size(0) / hd;
  const int64_t N = x.size(1);
  const SideBySide fused = side_by_side({attn.wq.get(), attn.wk.get(), attn.wv.get()});
  if (fused.found()) {
    const auto heads = fused.forward(x).view({N, n_head + 2 * n_kv_head, hd});  // q's heads, k's, v's
    const auto v = heads.narrow(1, n_head + n_kv_head, n_kv_head);
    if (cos.defined() && attn.fused()) {
      auto q = rotate_and_write_paged_kv(cache, heads.narrow(1, 0, n_head), heads.narrow(1, n_head, n_kv_head), v,
                                         cos, sin, batch);
      if (q.defined()) return q;
    }
    const auto qk = paged_rope(attn, heads.narrow(1, 0, n_head + n_kv_head).transpose(0, 1).unsqueeze(0), cos, sin)
                        .squeeze(0)
                        .transpose(0, 1);  // [N, H + H_kv, hd]
    write_paged_kv(cache, qk.narrow(1, n_head, n_kv_head), v, batch);
    return qk.narrow(1, 0, n_head);
  }
  const auto qkv = forward_shared_input({attn.wq.get(), attn.wk.get(), attn.wv.get()}, x);
  const auto k = paged_rope(attn, qkv[1].view({1, N, n_kv_head, hd}).transpose(1, 2), cos, sin);
  write_paged_kv(cache, k.squeeze(0).transpose(0, 1), qkv[2].view({N, n_kv_head, hd}), batch);
  return paged_rope(attn, qkv[0].view({1, N, n_head, hd}).transpose(1, 2), cos, sin).squeeze(0).transpose(0, 1);
}

// AttentionImpl::forward's projections and RoPE, then the paged cache's write and read. x: [1, N, D].
at::Tensor paged_attention_layer(AttentionImpl& attn, const at::Tensor& x, const at::Tensor& cos,
                                 const at::Tensor& sin, PagedLayerCache& cache, const PagedBatch& batch,
                                 int64_t hd) {
  const auto q = paged_qkv_into_cache(attn, x, cos, sin, cache, batch, hd);  // [N, H, hd]
  auto y = paged_attention(q, cache, batch);
  return attn.wo->forward(y.reshape({1, x.size(1), q.size(1) * hd}));
}

// h + down(hidden), as LinearImpl::forward_residual computes it. On CUDA, for a plain bias-free layer in h's dtype,
// the add is the GEMM's own (addmm, beta 1: one kernel instead of a GEMM and an add, one rounding instead of
// two); the CPU keeps the separate add, so that its fp32 logits stay those of the unfused path bit for bit.
at::Tensor paged_down_residual(LinearImpl& down, const at::Tensor& hidden, const at::Tensor& h) {
  if (!hidden.is_cuda() || !down.plain_in_inference() || down.fp8_weight().defined() || down.bias.defined() ||
      down.weight.scalar_type() != h.scalar_type() || hidden.scalar_type() != h.scalar_type())
    return down.forward_residual(hidden, h);
  const int64_t d = h.size(-1);
  return at::addmm(h.reshape({-1, d}), hidden.reshape({-1, hidden.size(-1)}), down.weight.t()).view(h.sizes());
}

// BlockImpl::forward without dropout, attention paged.
at::Tensor paged_block(BlockImpl& block, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       PagedLayerCache& cache, const PagedBatch& batch, int64_t hd) {
  auto [xs, y] = block.attn_norm->pass_forward(x);
  auto a = paged_attention_layer(*block.attn, y, cos, sin, cache, batch, hd);
  auto [h, n] = block.mlp_norm->add_forward(xs, a);
  MlpImpl& mlp = *block.mlp;
  const SideBySide gate_up =
      mlp.swiglu() ? side_by_side({mlp.gate.get(), mlp.up.get()}) : SideBySide{};
  if (!gate_up.found()) return mlp.forward_residual(n, h);
  // MlpImpl's SwiGLU with gate and up in one GEMM; the down projection and the residual add as forward_residual.
  const auto gu = gate_up.forward(n);  // [1, N, 2 d_ff]: gate | up
  const int64_t d_ff = mlp.gate->weight.size(0);
  const auto gate = gu.narrow(-1, 0, d_ff), up = gu.narrow(-1, d_ff, d_ff);
  const auto hidden = mlp.fused() ? fused_swiglu(gate, up) : at::silu(gate) * up;
  return paged_down_residual(*mlp.down, hidden, h);
}

}  // namespace

std::vector<PagedLayerCache> make_paged_cache(const TransformerImpl& model, int64_t num_blocks, int64_t block_size) {
  const ModelConfig& cfg = model.config();
  MT_CHECK(model.blocks->size() > 0, "make_paged_cache: a model without blocks");
  const int64_t hd = cfg.d_model / cfg.n_head;
  // This rank's key heads from wk's rows; the dtype and device from the head, as a weight held in FP8 keeps only
  // its shape and dtype (model/fp8_weights.h).
  const auto& wk = model.blocks->ptr<BlockImpl>(0)->attn->wk->weight;
  const auto opts = wk.options().device(model.head_weight().device()).requires_grad(false);
  std::vector<PagedLayerCache> cache(model.blocks->size());
  for (auto& layer : cache) {
    layer.k = at::zeros({num_blocks, block_size, wk.size(0) / hd, hd}, opts);
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
