// training_flops_per_token (training_flops.h).
#include "meshtrain/plan/training_flops.h"

#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {

TrainingFlops training_flops_per_token(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  double non_embed = 0;      // the blocks' and the final norm's parameters
  double frozen_matmul = 0;  // frozen weights a token multiplies (blocks' and the head): no weight gradient
  for (const auto& g : param_groups(cfg)) {
    const ParamSpec& p = g.spec;
    const double n = static_cast<double>(g.blocks) * static_cast<double>(p.numel());
    const bool embed = p.name.rfind("tok_embed", 0) == 0 || p.name.rfind("pos_embed", 0) == 0 ||
                       p.name.rfind("lm_head", 0) == 0;
    if (!embed) non_embed += n;
    if (!g.trains && p.matmul) frozen_matmul += n;  // a look-up embedding is no matmul; a tied one is the head
  }
  const double D = static_cast<double>(m.d_model), V = static_cast<double>(m.vocab_size);
  const double attention = 2 * static_cast<double>(m.n_layer) * static_cast<double>(cfg.data.seq_len) * D;
  TrainingFlops f;
  f.model_per_token = 3 * (2 * (non_embed + V * D) + attention);
  f.hardware_per_token = f.model_per_token - 2 * frozen_matmul +
                         (cfg.train.activation_checkpointing ? 2 * non_embed + attention : 0);
  return f;
}

}  // namespace meshtrain::plan
