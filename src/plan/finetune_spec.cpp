// LoRA targets and adapter shapes (finetune_spec.h).
#include "meshtrain/plan/finetune_spec.h"

#include <algorithm>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The weight each projection name is, per family (param_table.h's names, without "blocks.N.").
const std::map<std::string, std::string>& projection_weights(const std::string& family) {
  static const std::map<std::string, std::string> llama = {
      {"q", "attn.wq.weight"}, {"k", "attn.wk.weight"},   {"v", "attn.wv.weight"},  {"o", "attn.wo.weight"},
      {"gate", "mlp.w1.weight"}, {"up", "mlp.w3.weight"}, {"down", "mlp.w2.weight"}};
  static const std::map<std::string, std::string> gpt2 = {
      {"q", "attn.wq.weight"}, {"k", "attn.wk.weight"}, {"v", "attn.wv.weight"}, {"o", "attn.wo.weight"},
      {"up", "mlp.fc.weight"}, {"down", "mlp.proj.weight"}};
  return family == "llama" ? llama : gpt2;
}

}  // namespace

const std::vector<std::string>& lora_projection_names() {
  static const std::vector<std::string> k = {"q", "k", "v", "o", "gate", "up", "down"};
  return k;
}

FinetuneSpec FinetuneSpec::parse(int64_t rank, const std::string& targets, const std::string& offload) {
  FinetuneSpec ft;
  MT_USER_CHECK(rank >= 0, "--lora-rank: given ", rank, "; valid: 0 (no LoRA) or a positive rank");
  ft.lora_rank = rank;
  MT_USER_CHECK(offload == "none" || offload == "cpu", "--offload: given '", offload, "'; valid: none, cpu");
  ft.offload = offload == "cpu";
  if (rank == 0) return ft;
  const auto& names = lora_projection_names();
  if (targets == "all") {
    ft.lora_targets = names;
    return ft;
  }
  for (size_t b = 0; b <= targets.size();) {
    const size_t e = std::min(targets.find(',', b), targets.size());
    const std::string t = targets.substr(b, e - b);
    MT_USER_CHECK(std::find(names.begin(), names.end(), t) != names.end(), "--lora-targets: given '", t,
                  "' (in '", targets, "'); valid: all, or a comma-separated list of ", joined(names));
    if (std::find(ft.lora_targets.begin(), ft.lora_targets.end(), t) == ft.lora_targets.end())
      ft.lora_targets.push_back(t);
    b = e + 1;
  }
  return ft;
}

std::vector<ParamSpec> lora_params(const ModelConfig& m, const FinetuneSpec& ft) {
  std::vector<ParamSpec> out;
  if (!ft.lora()) return out;
  const auto& weights = projection_weights(m.family);
  std::map<std::string, std::string> wanted;  // weight name in a block → projection
  for (const auto& t : ft.lora_targets) {
    auto it = weights.find(t);
    std::vector<std::string> have;
    for (const auto& [p, w] : weights) have.push_back(p);
    MT_USER_CHECK(it != weights.end(), "LoRA target '", t, "' does not exist in a ", m.family, " model; valid: ",
                  joined(have));
    wanted[it->second] = t;
  }
  const int64_t r = ft.lora_rank;
  for (const auto& p : param_table(m)) {
    if (p.block < 0) continue;
    const std::string local = p.name.substr(p.name.find('.', 7) + 1);  // "blocks.N." stripped
    if (!wanted.count(local)) continue;
    const std::string stem = p.name.substr(0, p.name.size() - 7);  // ".weight" stripped
    const int64_t out_dim = p.shape[0], in_dim = p.shape[1];
    // A follows the weight's input columns (split under row parallelism), B its output rows (column parallelism).
    out.push_back({stem + ".lora_A", {r, in_dim}, p.block, p.split == TpSplit::cols ? TpSplit::cols : TpSplit::replicated,
                   true});
    out.push_back({stem + ".lora_B", {out_dim, r}, p.block, p.split == TpSplit::rows ? TpSplit::rows : TpSplit::replicated,
                   true});
  }
  return out;
}

}  // namespace meshtrain::plan
