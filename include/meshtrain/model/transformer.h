// The decoder-only transformer shared by both families (docs/architecture.md, room `model`):
//   gpt2:  tok_embed + pos_embed → blocks (LayerNorm, GELU MLP, biases) → final_norm → tied lm_head
//   llama: tok_embed → blocks (RMSNorm, RoPE, GQA, SwiGLU, no biases) → final_norm → lm_head (tied optional)
// Parameter names (state_dict keys): tok_embed.weight, pos_embed.weight, blocks.{i}.attn_norm.weight,
// blocks.{i}.attn.{wq,wk,wv,wo}.{weight,bias}, blocks.{i}.mlp_norm.*, blocks.{i}.mlp.{fc,proj | w1,w2,w3}.*,
// final_norm.*, lm_head.weight (untied only).
// A pipeline stage builds the same class over a ModelSpan: only its layers (named by their global index:
// model/block_list.h), the embeddings on the first stage, final norm + head on the last (with tied embeddings
// the last stage also holds tok_embed.weight, the head's copy of the first stage's: parallel/pipeline/).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <optional>

#include "meshtrain/core/config.h"
#include "meshtrain/model/block.h"
#include "meshtrain/model/block_list.h"
#include "meshtrain/model/block_runner.h"
#include "meshtrain/model/kv_cache.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/table_rows.h"

namespace meshtrain::model {

// What the parallel layers install so the model runs sharded without ever talking to a communicator (tensor
// parallelism: parallel/tp/tensor_parallel.h). Each left empty = the plain single-process behaviour.
struct TransformerHooks {
  // Applied to the embeddings' sum before the first block; sequence parallelism splits the sequence over
  // ranks here. x: [B, T, D] → [B, T', D].
  std::function<at::Tensor(const at::Tensor& x)> enter_blocks;
  // The output head on the final norm's output h: [B, T', D] → logits over the full vocabulary [B, T, V].
  std::function<at::Tensor(const at::Tensor& h)> logits;
  // Mean next-token cross-entropy (fp32 scalar) of h against targets [B, T] over the targets that are not
  // -100 — free to never form the full logits (the vocab-parallel cross-entropy does not).
  std::function<at::Tensor(const at::Tensor& h, const at::Tensor& targets)> loss;
};

// The part of the model one module holds: all of it by default; a pipeline stage's share otherwise.
struct ModelSpan {
  int64_t first_block = 0;
  int64_t end_block = -1;  // one past the last layer; -1 = n_layer
  bool embed = true;       // tok_embed (+ pos_embed): the first stage
  bool head = true;        // final_norm + lm_head + loss: the last stage
};

class TransformerImpl : public torch::nn::Module {
 public:
  // `cfg` must be resolved (core/config.h resolve()): n_kv_head and d_ff filled. Parameters are created
  // with `opts` and left uninitialised (init_weights); with the meta device nothing is allocated
  // (materialize, or the parallel layers, give them storage). RoPE tables are always real (CPU).
  // A span with the head but not `embed` holds tok_embed.weight anyway when the embeddings are tied: the
  // head's copy of the weight (embed() stays the first stage's).
  explicit TransformerImpl(const ModelConfig& cfg, const at::TensorOptions& opts = {}, ModelSpan span = {});

  // tokens: [B, T] int64 → logits [B, T, V]. With `cache`, positions continue after the cached ones.
  at::Tensor forward(const at::Tensor& tokens, KVCache* cache = nullptr);
  // The final-norm output, before the head: [B, T] → [B, T, D]. With `docs` (packed documents, no cache),
  // positions restart at each document and attention stays within it (model/documents.h).
  at::Tensor hidden(const at::Tensor& tokens, KVCache* cache = nullptr, const Documents* docs = nullptr);
  // The three pieces hidden() and loss() are made of, for a pipeline stage that holds some of them.
  // Embeddings (+ dropout, + the enter_blocks hook): tokens [B, T] → x [B, T', D]. Needs span().embed.
  // `rows`, where given, is set when x is nothing but rows of the token embedding's table (no position
  // embedding, dropout or hook on top), else left empty.
  at::Tensor embed(const at::Tensor& tokens, const Documents* docs = nullptr, std::optional<TableRows>* rows = nullptr);
  // This module's blocks over x [B, T', D] for sequences of `seq_len` positions from 0 (RoPE tables), or
  // restarting at each of `docs`' documents. `x_rows` (from embed) lets the first block's norm gather x again in
  // backward instead of keeping it, where no block runner (checkpointing, FSDP) wraps the block.
  at::Tensor run_blocks(const at::Tensor& x, int64_t seq_len, const Documents* docs = nullptr,
                        const TableRows* x_rows = nullptr);
  // Final norm, head and mean loss of x [B, T', D] against targets [B, T]. Needs span().head.
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets);
  const ModelSpan& span() const { return span_; }

  // The output head on the final norm's output h: [..., D] → logits over the full vocabulary [..., V] (the
  // weights' dtype). Through the logits hook where one is set: tensor parallelism gathers its vocabulary shards
  // there, a collective every rank of the group calls.
  at::Tensor head_logits(const at::Tensor& h);
  // The output projection's weight [V, D]: lm_head's, or the token embedding when tied.
  const at::Tensor& head_weight() const { return lm_head ? lm_head->weight : tok_embed->weight; }
  // Mean next-token cross-entropy (fp32) of logits(tokens) against targets [B, T], over the targets that are
  // not -100 (masked: prompt tokens, padding, a document's first token). With a chunk size set, through the
  // chunked head + loss (linear_cross_entropy.h: the full logits never exist); with 0, as
  // cross_entropy(linear(h).float()) — full logits, as plain PyTorch does. `docs`: packed documents.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets, const Documents* docs = nullptr);
  // Bytes of fp32 logits per loss chunk; 0 = no chunking.
  void set_loss_chunk_bytes(int64_t bytes) { loss_chunk_bytes_ = bytes; }
  // Fused CUDA kernels for the loss on full logits (fused_cross_entropy.h), RoPE (fused_rope.h), SwiGLU
  // (fused_swiglu.h), the residual add + norm (fused_add_norm.h) and GPT-2's bias + GELU
  // (fused_linear_gelu.h) where they apply (CUDA, fp32/bf16; default on); off = the composite ATen ops
  // throughout.
  void set_fused_kernels(bool on);
  bool fused_kernels() const { return fused_; }
  // The residual add + norm kernel inside each block (fused_add_norm.h), on while fused_kernels() and this
  // both hold (default on): a switch of its own so that its share of the step is measurable.
  void set_fused_norm(bool on);
  bool fused_norm() const { return fused_norm_; }
  // GPT-2's MLP bias + GELU fused with its matmul (fused_linear_gelu.h), on while fused_kernels() and this
  // both hold (default on); a switch of its own, as set_fused_norm.
  void set_fused_gelu(bool on);
  bool fused_gelu() const { return fused_gelu_; }
  // GPT-2's bias, GELU and bias-gradient work inside the GEMMs' cuBLASLt epilogues: the whole MLP as one
  // function (gelu_mlp.h) and every biased linear's bias gradient in its weight-gradient GEMM (bias_linear.h),
  // on while fused_kernels() and this both hold (default off until measured on a GPU).
  void set_gemm_epilogues(bool on);
  bool gemm_epilogues() const { return gemm_epilogues_; }
  // The adds the GEMMs do themselves (LinearImpl::set_fused_adds: the residual add in the MLP's last GEMM, the
  // q/k/v and gate/up input gradients summed by theirs), on while fused_kernels() and this both hold (default on).
  void set_fused_adds(bool on);
  bool fused_adds() const { return fused_adds_; }
  // Every switch above as the run's train.* keys set them, and cuBLASLt's kernel tuning (lt::set_tuning:
  // train.gemm_tuning, process-wide).
  void use_kernels(const TrainConfig& train);

  // Every parameter set to its initial value for `seed` (model/init.h: a function of seed and name only).
  void init_weights(int64_t seed);
  // Gives every meta parameter real storage on `device`, initialised for `seed`, and moves the buffers
  // there: the replicated case of deferred init (sharded layouts materialise only their own blocks).
  void materialize(const at::Device& device, int64_t seed);
  // How blocks run (block_runner.h); empty = plainly. Not used with a KV cache (generation).
  void set_block_runner(BlockRunner runner) { runner_ = std::move(runner); }
  void set_hooks(TransformerHooks hooks) { hooks_ = std::move(hooks); }

  int64_t num_params() const;
  // Parameters whose embedding role exempts them from weight decay by default (GPT-2/nanoGPT convention
  // applies decay to ≥2-D weights only; embeddings and the untied head are 2-D, so they are listed here).
  bool is_embedding(const std::string& name) const;
  // Forward FLOPs per token at sequence length T: 2·(non-embedding params + the output projection) for the
  // matmuls plus 2·n_layer·T·d for causal attention scores and values (half of PaLM's unmasked 4·L·T·d;
  // ×3 for forward+backward; docs/metrics.md).
  double flops_per_token(int64_t seq_len) const;
  KVCache make_cache() const;
  const ModelConfig& config() const { return cfg_; }

  Embedding tok_embed{nullptr}, pos_embed{nullptr};
  BlockList blocks{nullptr};
  Norm final_norm{nullptr};
  Linear lm_head{nullptr};

 private:
  at::Tensor loss_of_hidden(const at::Tensor& h, const at::Tensor& targets);

  ModelConfig cfg_;
  ModelSpan span_;
  at::Tensor inv_freq_;  // RoPE (llama), buffer [hd/2]
  BlockRunner runner_;
  int64_t loss_chunk_bytes_ = 0;
  bool fused_ = true;
  bool fused_norm_ = true;
  bool fused_gelu_ = true;
  bool gemm_epilogues_ = true;
  bool fused_adds_ = true;
  TransformerHooks hooks_;
};
TORCH_MODULE(Transformer);

}  // namespace meshtrain::model
