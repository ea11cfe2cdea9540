// The parameter list of model/transformer.cpp (param_table.h), in its registration order: tok_embed,
// pos_embed (gpt2), blocks.i.{attn_norm, attn.{wq,wk,wv,wo}, mlp_norm, mlp.{w1,w2,w3 | fc,proj}}, final_norm,
// lm_head (untied); with LoRA, a targeted projection's lora_A and lora_B right after its weight.
#include "meshtrain/plan/param_table.h"

#include <fnmatch.h>

#include <algorithm>
#include <iterator>
#include <mutex>
#include <optional>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"

namespace meshtrain::plan {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> ParamSpec::tp_shape(int64_t r, int64_t tp) const {
  std::vector<int64_t> s = shape;
  switch (split) {
    case TpSplit::replicated: break;
    case TpSplit::rows: s[0] /= tp; break;
    case TpSplit::cols: s[1] /= tp; break;
    case TpSplit::vocab: s[0] = shape[0] * (r + 1) / tp - shape[0] * r / tp; break;
  }
  return s;
}

namespace {

// The parameters in registration order: the root's before the blocks (`part` -1), block `b`'s (`part` b), or
// the root's after them (`part` -2).
std::vector<ParamSpec> params_of(const ModelConfig& m, int64_t part) {
  MT_CHECK(m.d_ff > 0 && m.n_kv_head > 0, "param_table needs a resolved ModelConfig");
  const bool llama = m.family == Family::llama, bias = !llama;
  const int64_t D = m.d_model, hd = m.d_model / m.n_head, q = m.n_head * hd, kv = m.n_kv_head * hd, F = m.d_ff;
  std::vector<ParamSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, int64_t block, TpSplit split, bool matmul) {
    out.push_back({std::move(name), std::move(shape), block, split, matmul});
  };
  auto norm = [&](const std::string& name, int64_t b) {
    add(name + ".weight", {D}, b, TpSplit::replicated, false);
    if (!llama) add(name + ".bias", {D}, b, TpSplit::replicated, false);
  };
  if (part == -1) {
    // Tied: the token embedding is also the head's weight, so a matmul operand.
    add("tok_embed.weight", {m.vocab_size, D}, -1, TpSplit::vocab, m.tie_embeddings);
    if (!llama) add("pos_embed.weight", {m.max_seq_len, D}, -1, TpSplit::replicated, false);
    return out;
  }
  if (part == -2) {
    norm("final_norm", -1);
    if (!m.tie_embeddings) add("lm_head.weight", {m.vocab_size, D}, -1, TpSplit::vocab, true);
    return out;
  }
  const auto lora = lora_targets(m);  // model/linear/lora_linear.h: A [r, in] and B [out, r] after the base's
  auto linear = [&](const std::string& name, int64_t in, int64_t outf, int64_t b, bool column,
                    std::optional<LoraTarget> target = std::nullopt) {
    add(name + ".weight", {outf, in}, b, column ? TpSplit::rows : TpSplit::cols, true);
    if (bias) add(name + ".bias", {outf}, b, column ? TpSplit::rows : TpSplit::replicated, true);
    if (!target || std::find(lora.begin(), lora.end(), *target) == lora.end()) return;
    // Under TP the adapters follow the weight on the dimension they share with it, the other piece whole
    // (parallel/tp/tensor_parallel.h): column — A whole, B's rows split; row — A's columns split, B whole.
    add(name + ".lora_A", {m.lora_rank, in}, b, column ? TpSplit::replicated : TpSplit::cols, true);
    add(name + ".lora_B", {outf, m.lora_rank}, b, column ? TpSplit::rows : TpSplit::replicated, true);
  };
  const int64_t b = part;
  const std::string p = "blocks." + std::to_string(b) + ".";
  norm(p + "attn_norm", b);
  linear(p + "attn.wq", D, q, b, true, LoraTarget::q);
  linear(p + "attn.wk", D, kv, b, true, LoraTarget::k);
  linear(p + "attn.wv", D, kv, b, true, LoraTarget::v);
  linear(p + "attn.wo", q, D, b, false, LoraTarget::o);
  norm(p + "mlp_norm", b);
  if (llama) {
    linear(p + "mlp.w1", D, F, b, true, LoraTarget::gate);
    linear(p + "mlp.w2", F, D, b, false, LoraTarget::down);
    linear(p + "mlp.w3", D, F, b, true, LoraTarget::up);
  } else {
    linear(p + "mlp.fc", D, F, b, true);
    linear(p + "mlp.proj", F, D, b, false);
  }
  return out;
}

// Which of block b's parameters train (its names differ from block 0's only in the index).
std::vector<bool> block_trains(const Config& cfg, const std::vector<ParamSpec>& block0, int64_t b) {
  const std::string from = "blocks.0.", to = "blocks." + std::to_string(b) + ".";
  std::vector<bool> t;
  for (const auto& p : block0) t.push_back(trains(cfg, to + p.name.substr(from.size())));
  return t;
}

using BlockRuns = std::vector<std::pair<std::vector<bool>, int64_t>>;  // (which parameters train, blocks)

// Run lengths of consecutive blocks that train alike. Without train.freeze only LoRA decides, by a name's
// suffix, which every block shares: one run, no per-block matching. With it every block's names are matched
// (O(n_layer)); a search asks again for every layout of the same model, so the last answer is kept.
BlockRuns block_runs(const Config& cfg, const std::vector<ParamSpec>& block0) {
  const int64_t L = cfg.model.n_layer;
  if (L <= 0) return {};
  if (cfg.train.freeze.empty()) return {{block_trains(cfg, block0, 0), L}};
  std::vector<std::string> key = cfg.train.freeze;
  key.push_back(std::to_string(L) + (cfg.model.lora_rank > 0 ? " lora" : ""));
  for (const auto& p : block0) key.push_back(p.name);
  static std::mutex mu;
  static std::vector<std::string> last_key;
  static BlockRuns last;
  std::lock_guard<std::mutex> lock(mu);
  if (key == last_key) return last;
  BlockRuns runs;
  for (int64_t b = 0; b < L; ++b) {
    std::vector<bool> t = block_trains(cfg, block0, b);
    if (!runs.empty() && runs.back().first == t) ++runs.back().second;
    else runs.emplace_back(std::move(t), 1);
  }
  last_key = std::move(key);
  last = runs;
  return runs;
}

}  // namespace

std::vector<ParamSpec> param_table(const ModelConfig& m) {
  std::vector<ParamSpec> out = params_of(m, -1);
  for (int64_t b = 0; b < m.n_layer; ++b) {
    auto block = params_of(m, b);
    out.insert(out.end(), std::make_move_iterator(block.begin()), std::make_move_iterator(block.end()));
  }
  auto tail = params_of(m, -2);
  out.insert(out.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
  return out;
}

std::vector<ParamGroup> param_groups(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  std::vector<ParamGroup> out;
  for (auto& p : params_of(m, -1)) out.push_back({p, trains(cfg, p.name), 1});
  const std::vector<ParamSpec> block0 = params_of(m, 0);
  int64_t first = 0;
  for (const auto& [train, n] : block_runs(cfg, block0)) {
    auto specs = params_of(m, first);
    for (size_t k = 0; k < specs.size(); ++k) out.push_back({std::move(specs[k]), train[k], n});
    first += n;
  }
  for (auto& p : params_of(m, -2)) out.push_back({p, trains(cfg, p.name), 1});
  return out;
}

bool trains(const std::vector<std::string>& frozen_globs, const std::string& name) {
  for (const auto& g : frozen_globs)
    if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return false;
  return true;
}

bool trains(const Config& cfg, const std::string& name) {
  auto ends_with = [&](const char* s) {
    const std::string e(s);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (cfg.model.lora_rank > 0 && !ends_with(".lora_A") && !ends_with(".lora_B")) return false;
  return trains(cfg.train.freeze, name);
}

}  // namespace meshtrain::plan
