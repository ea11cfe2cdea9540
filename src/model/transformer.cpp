#include "meshtrain/model/transformer.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/kernels/fused_cross_entropy.h"
#include "meshtrain/model/init.h"
#include "meshtrain/model/linear/linear_cross_entropy.h"
#include "meshtrain/model/kernels/lt_matmul.h"
#include "meshtrain/model/rotary.h"

namespace meshtrain::model {
namespace {

// The head's matmuls see the vocabulary padded to a multiple of this (see padded_head_loss).
constexpr int64_t kHeadAlign = 64;

// Fused loss on the full logits: the head and the loss of hidden states h with head weight w [V, d].
at::Tensor padded_head_loss(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets) {
  // An odd vocabulary (GPT-2's 50257) makes the logits' leading dimension odd, and cuBLAS then falls back to
  // unaligned kernels several times slower (H200: the head was 47 % of a GPT-2 124M step). Zero rows pad the
  // weight to a multiple of 64 for the matmuls; the loss ignores the padded columns, whose gradient is 0, and
  // the pad's backward drops the padded rows' gradient. The copy of the weight is small beside the logits.
  const int64_t V = w.size(0), padded = (V + kHeadAlign - 1) / kHeadAlign * kHeadAlign;
  const auto wp = padded == V ? w : at::constant_pad_nd(w, {0, 0, 0, padded - V});
  auto logits = at::linear(h, wp).reshape({-1, padded});
  // The logits are this function's own: the fused loss may overwrite them with their gradient.
  return fused_cross_entropy(logits, targets.reshape({-1}), -100, /*in_place=*/true, V);
}

}  // namespace

TransformerImpl::TransformerImpl(const ModelConfig& cfg, const at::TensorOptions& opts, ModelSpan span)
    : cfg_(cfg), span_(span) {
  MT_CHECK(cfg.n_kv_head > 0 && cfg.d_ff > 0, "TransformerImpl needs a resolved ModelConfig");
  if (span_.end_block < 0) span_.end_block = cfg.n_layer;
  MT_CHECK(0 <= span_.first_block && span_.first_block <= span_.end_block && span_.end_block <= cfg.n_layer,
           "TransformerImpl: layers [", span_.first_block, ", ", span_.end_block, ") outside [0, ", cfg.n_layer, ")");
  const bool llama = cfg.family == Family::llama;
  // A pipeline's last stage with tied embeddings holds a copy of the token embedding for its head (the same
  // name, so the same initial values and checkpoint tensor); the pipeline keeps the two copies equal.
  const bool head_copy = span_.head && !span_.embed && cfg.tie_embeddings;
  if (span_.embed || head_copy) tok_embed = register_module("tok_embed", Embedding(cfg.vocab_size, cfg.d_model, opts));
  if (span_.embed && !llama) pos_embed = register_module("pos_embed", Embedding(cfg.max_seq_len, cfg.d_model, opts));
  blocks = register_module("blocks", BlockList());
  for (int64_t i = span_.first_block; i < span_.end_block; ++i) blocks->push_back(i, Block(cfg, opts).ptr());
  if (span_.head) {
    final_norm = register_module("final_norm", Norm(llama, cfg.d_model, cfg.norm_eps, opts));
    if (!cfg.tie_embeddings) lm_head = register_module("lm_head", Linear(cfg.d_model, cfg.vocab_size, false, opts));
  }
  if (llama) {
    RopeScaling scaling;
    // Llama 3.1+ presets use the published scaling (factor 8 over 8192 original positions) once the model
    // is asked for longer contexts than the original.
    if (cfg.max_seq_len > scaling.original_max_positions) scaling.factor = 8.0;
    // Computed, not initialised: on the model's device, except that a meta model keeps it real (on the CPU)
    // for materialize() to move.
    const at::Device home = opts.device().is_meta() ? at::Device(at::kCPU) : opts.device();
    inv_freq_ = register_buffer("inv_freq", rope_inv_freq(cfg.d_model / cfg.n_head, cfg.rope_theta, scaling).to(home));
  }
  // The blocks' own switches as this model's defaults say, so that a model used without use_kernels() runs
  // the kernels use_kernels() would choose for a default TrainConfig (the linears' default is off).
  set_fused_kernels(fused_);
}

at::Tensor TransformerImpl::hidden(const at::Tensor& tokens, KVCache* cache, const Documents* packed) {
  MT_CHECK(span_.embed && span_.head && blocks->size() == static_cast<size_t>(cfg_.n_layer),
           "TransformerImpl::hidden needs the whole model (this module holds a pipeline stage)");
  const int64_t T = tokens.size(1);
  const int64_t offset = cache ? cache->length() : 0;
  MT_CHECK(offset + T <= cfg_.max_seq_len, "sequence of ", offset + T, " tokens exceeds model.max_seq_len ",
           cfg_.max_seq_len);
  if (!cache) {
    std::optional<TableRows> rows;
    const at::Tensor x = embed(tokens, packed, &rows);
    return final_norm->forward(run_blocks(x, T, packed, rows ? &*rows : nullptr));
  }
  MT_CHECK(!(packed && packed->packed()), "packed documents with a KV cache");
  auto x = tok_embed->forward(tokens);  // [B, T, D]
  at::Tensor cos, sin;
  if (pos_embed) {
    x = x + pos_embed->forward(at::arange(offset, offset + T, tokens.options()));
  } else {
    std::tie(cos, sin) = rope_tables(inv_freq_, offset, T);
  }
  if (is_training() && cfg_.dropout > 0) x = at::dropout(x, cfg_.dropout, true);
  if (hooks_.enter_blocks) x = hooks_.enter_blocks(x);
  for (size_t i = 0; i < blocks->size(); ++i)
    x = blocks->ptr<BlockImpl>(i)->forward(x, cos, sin, &cache->layers[i], nullptr);
  return final_norm->forward(x);
}

at::Tensor TransformerImpl::embed(const at::Tensor& tokens, const Documents* docs, std::optional<TableRows>* rows) {
  MT_CHECK(span_.embed, "TransformerImpl::embed on a pipeline stage without the embedding");
  const int64_t T = tokens.size(1);
  MT_CHECK(T <= cfg_.max_seq_len, "sequence of ", T, " tokens exceeds model.max_seq_len ", cfg_.max_seq_len);
  auto x = tok_embed->forward(tokens);  // [B, T, D]
  if (pos_embed) {
    const bool packed = docs && docs->packed();
    x = x + pos_embed->forward(packed ? docs->positions : at::arange(0, T, tokens.options()));
  }
  const bool dropout = is_training() && cfg_.dropout > 0;
  if (rows && !pos_embed && !dropout && !hooks_.enter_blocks) *rows = tok_embed->rows(tokens);
  if (dropout) x = at::dropout(x, cfg_.dropout, true);
  if (hooks_.enter_blocks) x = hooks_.enter_blocks(x);
  return x;
}

at::Tensor TransformerImpl::run_blocks(const at::Tensor& x_in, int64_t seq_len, const Documents* packed,
                                       const TableRows* x_rows) {
  // A copy the blocks share (and activation checkpointing keeps for recomputation): the mask, where SDPA
  // needs one, is made once for all layers.
  std::shared_ptr<Documents> docs;
  if (packed && packed->packed()) {
    docs = std::make_shared<Documents>(*packed);
    if (!x_in.is_cuda() && !docs->mask.defined()) docs->mask = block_causal_mask(docs->positions);
  }
  at::Tensor cos, sin;
  if (inv_freq_.defined()) {
    std::tie(cos, sin) = rope_tables(inv_freq_, 0, seq_len);
    if (docs) {  // each token's row of the tables at its position in its document: [B, 1, T, hd]
      const int64_t B = docs->positions.size(0);
      const auto at_pos = docs->positions.reshape({-1}).to(cos.device());
      cos = cos.index_select(0, at_pos).view({B, 1, seq_len, -1});
      sin = sin.index_select(0, at_pos).view({B, 1, seq_len, -1});
    }
  }
  at::Tensor x = x_in;
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto block = blocks->ptr<BlockImpl>(i);
    if (runner_) {
      // Captures by value: the runner may call it again in backward (block_runner.h).
      BlockFn run = [block, cos, sin, docs](const at::Tensor& h) {
        return block->forward(h, cos, sin, nullptr, docs.get());
      };
      x = runner_(static_cast<int64_t>(i), *block, x, run);
    } else {
      x = block->forward(x, cos, sin, nullptr, docs.get(), i == 0 ? x_rows : nullptr);
    }
  }
  return x;
}

at::Tensor TransformerImpl::head_loss(const at::Tensor& x, const at::Tensor& targets) {
  MT_CHECK(span_.head, "TransformerImpl::head_loss on a pipeline stage without the head");
  return loss_of_hidden(final_norm->forward(x), targets);
}

at::Tensor TransformerImpl::forward(const at::Tensor& tokens, KVCache* cache) {
  return head_logits(hidden(tokens, cache));  // [B, T, V]
}

at::Tensor TransformerImpl::head_logits(const at::Tensor& h) {
  if (hooks_.logits) return hooks_.logits(h);
  return lm_head ? lm_head->forward(h) : at::linear(h, tok_embed->weight);
}

at::Tensor TransformerImpl::loss(const at::Tensor& tokens, const at::Tensor& targets, const Documents* docs) {
  return loss_of_hidden(hidden(tokens, nullptr, docs), targets);
}

at::Tensor TransformerImpl::loss_of_hidden(const at::Tensor& h, const at::Tensor& targets) {
  if (hooks_.loss) return hooks_.loss(h, targets);
  if (loss_chunk_bytes_ <= 0) {
    if (fused_ && h.is_cuda()) return padded_head_loss(h, head_weight(), targets);
    auto logits = at::linear(h, head_weight());
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
  }
  const int64_t rows = std::max<int64_t>(1, loss_chunk_bytes_ / (4 * cfg_.vocab_size));
  // The chunked head pads the vocabulary as the full-logits one does, where the GEMMs are cuBLAS's.
  return linear_cross_entropy(h.reshape({-1, h.size(-1)}), head_weight(), targets.reshape({-1}), rows,
                              h.is_cuda() ? kHeadAlign : 1);
}

void TransformerImpl::set_fused_kernels(bool on) {
  fused_ = on;
  // The final norm as the blocks' (under autocast it then writes bf16, which the head reads anyway: ATen's
  // norm wrote an fp32 [tokens, d_model] tensor, and the head loss saved its gradient in fp32 too).
  if (final_norm) final_norm->set_fused(on && fused_norm_);
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto block = blocks->ptr<BlockImpl>(i);
    block->attn->set_fused(on);
    block->mlp->set_fused(on);
    block->attn_norm->set_fused(on && fused_norm_);
    block->mlp_norm->set_fused(on && fused_norm_);
    block->mlp->set_fused_gelu(on && fused_gelu_);
    block->mlp->set_epilogues(on && gemm_epilogues_);
    // Every linear of the block, whichever module holds it (a layer that overrides forward ignores it).
    for (const auto& m : block->modules())
      if (auto* lin = dynamic_cast<LinearImpl*>(m.get())) {
        lin->set_fused_bias(on && gemm_epilogues_);
        lin->set_master_grads(on);
        lin->set_fused_adds(on && fused_adds_);
      }
  }
}

void TransformerImpl::set_fused_gelu(bool on) {
  fused_gelu_ = on;
  set_fused_kernels(fused_);
}

void TransformerImpl::set_gemm_epilogues(bool on) {
  gemm_epilogues_ = on;
  set_fused_kernels(fused_);
}

void TransformerImpl::set_fused_adds(bool on) {
  fused_adds_ = on;
  set_fused_kernels(fused_);
}

void TransformerImpl::use_kernels(const TrainConfig& train) {
  fused_norm_ = train.fused_norm;
  fused_gelu_ = train.fused_gelu;
  gemm_epilogues_ = train.gemm_epilogues;
  fused_adds_ = train.fused_adds;
  lt::set_tuning(train.gemm_tuning);  // process-wide: cuBLASLt's kernel choices serve every model in it
  set_fused_kernels(train.fused_kernels);
}

void TransformerImpl::set_fused_norm(bool on) {
  fused_norm_ = on;
  set_fused_kernels(fused_);
}

void TransformerImpl::init_weights(int64_t seed) {
  for (auto& item : named_parameters()) init_parameter(cfg_, item.key(), item.value(), seed);
}

void TransformerImpl::materialize(const at::Device& device, int64_t seed) {
  replace_parameters(*this, [&](const std::string& name, const at::Tensor& p) {
    if (!p.is_meta()) return p;
    auto real = at::empty(p.sizes(), p.options().device(device));
    init_parameter(cfg_, name, real, seed);
    return real;
  });
  for (auto& b : buffers()) {
    at::NoGradGuard no_grad;
    b.set_data(b.to(device));
  }
}

int64_t TransformerImpl::num_params() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

bool TransformerImpl::is_embedding(const std::string& name) const {
  return name.rfind("tok_embed.", 0) == 0 || name.rfind("pos_embed.", 0) == 0 || name.rfind("lm_head.", 0) == 0;
}

double TransformerImpl::flops_per_token(int64_t seq_len) const {
  int64_t non_embed = 0;
  for (const auto& item : named_parameters())
    if (!is_embedding(item.key())) non_embed += item.value().numel();
  // The output projection is a matmul even when tied to the embedding.
  const double head = static_cast<double>(cfg_.d_model) * cfg_.vocab_size;
  return 2.0 * (non_embed + head) + 2.0 * cfg_.n_layer * seq_len * cfg_.d_model;
}

KVCache TransformerImpl::make_cache() const {
  KVCache c;
  c.layers.resize(cfg_.n_layer);
  return c;
}

}  // namespace meshtrain::model
