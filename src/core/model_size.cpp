// Model sizes in long double arithmetic (model_size.h): the parameter count term by term, as
// model/transformer.cpp builds the model, and the two checks that use it.
#include "meshtrain/core/model_size.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/gradient_streaming.h"

namespace meshtrain {
namespace {

using Num = long double;

constexpr Num kInt64Max = static_cast<Num>(std::numeric_limits<int64_t>::max());

// Integers print exactly up to 2^53, larger numbers as "1.2e+25": readable and never wrapped.
std::string show(Num v) {
  if (v < 9007199254740992.0L) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3Lg", v);
  return buf;
}

std::string bytes(Num v) {
  char buf[48];
  if (v >= 1024.0L * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.4Lg GiB", v / (1024.0L * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.4Lg MiB", v / (1024.0L * 1024));
  return buf;
}

// llama's d_ff when 0: 8/3 × d_model rounded up to a multiple of 256 (config_resolve.cpp).
Num derived_d_ff(const ModelConfig& m) {
  const Num D = static_cast<Num>(m.d_model);
  if (m.family != Family::llama) return 4 * D;
  return std::ceil(std::floor(8 * D / 3) / 256) * 256;
}

}  // namespace

ModelSize model_size(const ModelConfig& m) {
  const bool llama = m.family == Family::llama;
  const Num V = static_cast<Num>(m.vocab_size), D = static_cast<Num>(m.d_model), L = static_cast<Num>(m.n_layer);
  const Num S = static_cast<Num>(m.max_seq_len), H = static_cast<Num>(std::max<int64_t>(m.n_head, 1));
  const Num KV = static_cast<Num>(m.n_kv_head > 0 ? m.n_kv_head : m.n_head);
  const Num F = m.d_ff > 0 ? static_cast<Num>(m.d_ff) : derived_d_ff(m);
  const Num kv_width = KV * (D / H);
  // One block: q, o (D × D) and k, v (kv heads × head size × D); the MLP; two norms. GPT-2 adds biases and
  // norm biases.
  Num attn = 2 * D * D + 2 * kv_width * D, mlp = llama ? 3 * D * F : 2 * D * F, norms = llama ? 2 * D : 4 * D;
  if (!llama) attn += 2 * D + 2 * kv_width, mlp += F + D;
  const Num block = attn + mlp + norms;
  ModelSize out;
  out.params = V * D + L * block + (llama ? D : 2 * D);
  out.arithmetic = cat("tok_embed vocab_size(", show(V), ") × d_model(", show(D), ") + n_layer(", show(L),
                       ") × ", show(block), " per block (d_ff ", show(F), ")");
  if (!llama) {
    out.params += S * D;
    out.arithmetic += cat(" + pos_embed max_seq_len(", show(S), ") × d_model");
  }
  if (!m.tie_embeddings) {
    out.params += V * D;
    out.arithmetic += " + lm_head vocab_size × d_model";
  }
  return out;
}

void check_model_sizes(const Config& cfg) {
  const std::string name = cfg.source.empty() ? "config" : cfg.source;
  const ModelSize size = model_size(cfg.model);
  MT_USER_CHECK(16 * size.params <= kInt64Max, name, ": model: ", show(size.params), " parameters = ",
                size.arithmetic, "; their training state (16 bytes each) would be ", show(16 * size.params),
                " bytes, more than 64-bit sizes hold (", show(kInt64Max), "); valid: a smaller model");
  const Num T = static_cast<Num>(cfg.data.seq_len > 0 ? cfg.data.seq_len : cfg.model.max_seq_len);
  const Num logits = static_cast<Num>(cfg.train.micro_batch_size) * (T + 1) * static_cast<Num>(cfg.model.vocab_size) * 4;
  MT_USER_CHECK(logits <= kInt64Max, name, ": data.seq_len: one micro-batch's logits are train.micro_batch_size(",
                cfg.train.micro_batch_size, ") × sequence(", show(T), ") × vocab_size(", cfg.model.vocab_size,
                ") × 4 bytes = ", show(logits), " bytes, more than 64-bit sizes hold; valid: a shorter data.seq_len "
                "(or model.max_seq_len, which it defaults to)");
}

void check_fits_device(const Config& cfg, bool training, int64_t device_bytes, const std::string& device) {
  const ParallelConfig& p = cfg.parallel;
  const int zero = p.fsdp > 1 && p.zero_stage == 0 ? 3 : static_cast<int>(p.zero_stage);
  const int64_t shard_ranks = std::max<int64_t>(p.dp, 1) * p.fsdp;
  const Num shard = static_cast<Num>(shard_ranks);
  const Num tp = static_cast<Num>(p.tp);
  // A pipeline stage holds about 1/pp of the parameters (the split balances them: parallel/pipeline/pipeline_split.h).
  const Num total = model_size(cfg.model).params;
  const Num P = total / static_cast<Num>(std::max<int64_t>(p.pp, 1));
  // optimizer.offload: cpu keeps the moments in host memory, and where the gradients stream
  // (core/gradient_streaming.h) the gradients too. A shard group of one counts as aliased (not streamed): the
  // lower bound never takes a gradient off the device that might stay there.
  const bool offload = cfg.optimizer.offload == OptimizerOffload::cpu;
  const GradientLayout layout{.zero_stage = zero, .aliased = zero >= 1 && shard_ranks == 1, .tp = p.tp, .pp = p.pp,
                              .gradient_shards = zero >= 3 ? shard_ranks : 1};
  const bool streamed = offload && offload_streams_gradients(layout, cfg.train.grad_accum);
  // Held: the weights and their gradients in the compute dtype (at most 4 bytes together, counted as the fp32
  // weights' 4).
  const bool holds =
      offload && offload_holds_gradients(layout, cfg.train.grad_accum, cfg.optimizer.offload_delay == 1);
  // Bytes per parameter on this rank: fp32 weights, gradients, two AdamW moments, each divided by tp and by
  // the data-parallel ranks once the ZeRO stage shards it.
  Num per_rank = 4 * P / (tp * (zero >= 3 ? shard : 1));
  if (training && !streamed && !holds) per_rank += 4 * P / (tp * (zero >= 2 ? shard : 1));
  if (training && !offload) per_rank += 8 * P / (tp * (zero >= 1 ? shard : 1));
  // LoRA: the base does not train — held in the compute dtype (a GPU's: bf16 unless train.dtype is fp32; a lower
  // bound on the CPU's fp32), or QLoRA's block linears in NF4 (≈ 0.5 bytes; the embeddings and head counted at
  // that rate too: a lower bound) — either sharded by FSDP (the NF4 rows too: parallel/fsdp/fully_shard.h), whole
  // elsewhere; the adapters' state is left out (a lower bound).
  const bool lora = training && cfg.model.lora_rank > 0;
  const bool nf4 = cfg.model.base_quant == BaseQuant::nf4;
  if (lora) {
    const Num base_bytes = nf4 ? 0.5L : (compute_dtype(cfg.train, /*cuda=*/true) == Dtype::bf16 ? 2 : 4);
    per_rank = base_bytes * P / (tp * (zero >= 3 ? shard : 1));
  }
  const char* held = lora ? (nf4 ? "the NF4 base of QLoRA (0.5 bytes a parameter; the adapters' state not counted"
                                 : "the frozen LoRA base (in the compute dtype; the adapters' state not counted")
                     : !training ? "the fp32 weights"
                     : streamed ? "training (fp32 weights; the gradients and AdamW moments are on the host"
                     : holds    ? "training (weights and gradients in the compute dtype; the AdamW state is on the host"
                     : offload  ? "training (fp32 weights and gradients; the AdamW moments are on the host"
                                : "training (fp32 weights, gradients and AdamW moments";
  const std::string name = cfg.source.empty() ? "config" : cfg.source;
  MT_USER_CHECK(per_rank <= static_cast<Num>(device_bytes), name, ": model: ", show(total), " parameters need ",
                bytes(per_rank), " per rank for ", held, training ? ", " : " (", "under ",
                p.pp > 1 ? cat("pp(", p.pp, "), ") : "", "tp(", p.tp, "), fsdp(", p.fsdp, "), zero_stage ", zero,
                ") but ", device, " has ", bytes(static_cast<Num>(device_bytes)), "; valid: a smaller model, "
                "or more ranks sharding it (parallel.fsdp, parallel.zero_stage, parallel.tp, parallel.pp)");
}

}  // namespace meshtrain
