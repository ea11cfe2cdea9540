// TrainablePolicy: which parameters train, decided once, in parallelize() (parallel/parallelize.h), before any
// layout wraps the model. Every layout then follows the decision: DDP buckets only trainable parameters, FSDP
// keeps frozen ones in parameter-only units (no gradient buffers, no reduce-scatter), the optimizer sees only
// trainable ones, the gradient norm counts only theirs, and checkpoints still hold every parameter once.
//
// Sources: train.freeze (globs over parameter names, core/config_enums.h), and LoRA (model.lora_rank > 0,
// docs/lora.md), which freezes its base through the same object — only the adapters train — rather than
// through a special case in any layout.
//
//   TrainablePolicy policy = TrainablePolicy::from_config(cfg);   // all train when train.freeze is empty
//   policy.apply(*net);                                                 // UserError: a pattern matching nothing
//   policy.trains("blocks.0.attn.wq.weight");
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::parallel {

class TrainablePolicy {
 public:
  TrainablePolicy() = default;  // every parameter trains
  // `what` names the setting in messages ("train.freeze").
  TrainablePolicy(std::vector<std::string> frozen_globs, std::string what);
  static TrainablePolicy from_config(const TrainConfig& t);
  // train.freeze, and with LoRA on only the adapters (model/linear/lora_linear.h) train.
  static TrainablePolicy from_config(const Config& cfg);

  // Adds patterns of parameters to freeze (e.g. an adapter freezing its base model).
  void freeze(const std::vector<std::string>& globs);
  // False when a freeze pattern matches `name` (a global parameter name).
  bool trains(const std::string& name) const;
  // Marks the module's frozen parameters requires_grad(false): every layout built afterwards reads the mark
  // (replaced parameters inherit it; model/param_module.h). UserError for a pattern that matches no
  // parameter, naming it, or when nothing would train.
  void apply(model::TransformerImpl& net) const;
  // Freezes every parameter that matches none of `globs` (e.g. LoRA: all but the adapters).
  void train_only(const std::vector<std::string>& globs);
  bool freezes_any() const { return !globs_.empty() || !only_.empty(); }

 private:
  std::vector<std::string> globs_;
  std::vector<std::string> only_;  // empty: no such restriction
  std::string what_ = "train.freeze";
};

}  // namespace meshtrain::parallel
