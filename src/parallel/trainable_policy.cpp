// TrainablePolicy: freeze patterns matched against global parameter names; see trainable_policy.h.
#include "meshtrain/parallel/trainable_policy.h"

#include <fnmatch.h>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

TrainablePolicy::TrainablePolicy(std::vector<std::string> frozen_globs, std::string what)
    : globs_(std::move(frozen_globs)), what_(std::move(what)) {}

TrainablePolicy TrainablePolicy::from_config(const TrainConfig& t) { return {t.freeze, "train.freeze"}; }

TrainablePolicy TrainablePolicy::from_config(const Config& cfg) {
  TrainablePolicy out = from_config(cfg.train);
  // LoRA: the base model is frozen, its adapters alone train (their names: model/linear/lora_linear.h).
  if (cfg.model.lora_rank > 0) out.train_only({"*.lora_A", "*.lora_B"});
  return out;
}

void TrainablePolicy::train_only(const std::vector<std::string>& globs) {
  only_.insert(only_.end(), globs.begin(), globs.end());
}

void TrainablePolicy::freeze(const std::vector<std::string>& globs) {
  globs_.insert(globs_.end(), globs.begin(), globs.end());
}

bool TrainablePolicy::trains(const std::string& name) const {
  // No FNM_PATHNAME: '*' crosses the dots of a parameter name ("blocks.0.*" is the whole block).
  auto matches = [&](const std::vector<std::string>& globs) {
    for (const auto& g : globs)
      if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
    return false;
  };
  return !matches(globs_) && (only_.empty() || matches(only_));
}

void TrainablePolicy::apply(model::TransformerImpl& net) const {
  if (!freezes_any()) return;
  const auto params = net.named_parameters();
  for (const auto& g : globs_) {
    bool matched = false;
    for (const auto& item : params) matched = matched || fnmatch(g.c_str(), item.key().c_str(), 0) == 0;
    MT_USER_CHECK(matched, what_, ": pattern '", g, "' matches no parameter (names look like tok_embed.weight or ",
                  "blocks.0.attn.wq.weight; '*' matches any characters)");
  }
  int64_t trainable = 0;
  for (auto& item : params) {
    const bool t = trains(item.key());
    item.value().set_requires_grad(t);
    trainable += t ? 1 : 0;
  }
  MT_USER_CHECK(trainable > 0, what_, ": the patterns freeze all ", params.size(),
                " parameters; valid patterns leave at least one to train");
}

}  // namespace meshtrain::parallel
