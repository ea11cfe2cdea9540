// A training step's FLOPs per token, both ways, in one place (docs/metrics.md "MFU"):
//
//   model     3 × F_fwd(T), F_fwd = 2 × (non-embedding parameters + d_model × vocab) + 2 × n_layer × T × d_model:
//             the convention MFU is counted in (torchtitan's, Megatron's), whatever trains
//   hardware  what the step executes: a frozen weight (LoRA's base, train.freeze, a frozen head) costs its
//             forward and its input's gradient, 4 FLOPs a parameter, not 6, since its weight gradient is never
//             computed; activation checkpointing runs each block's forward again (PaLM's HFU counts it)
//
// `meshtrain plan` prices its step time with the hardware count; the trainer reports MFU from the model count
// and HFU from the hardware count, so a LoRA run's utilisation is not read against work it never does.
#pragma once

#include "meshtrain/core/config.h"

namespace meshtrain::plan {

struct TrainingFlops {
  double model_per_token = 0;
  double hardware_per_token = 0;
};

// `cfg` resolved (data.seq_len, model.d_ff filled). Counted on the whole model, before any parallelism.
TrainingFlops training_flops_per_token(const Config& cfg);

}  // namespace meshtrain::plan
