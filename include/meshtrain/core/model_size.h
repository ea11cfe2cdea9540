// ModelSize: how much memory the model a config describes needs, computed before anything is allocated, so
// that a size LibTorch cannot allocate (d_model = 2^40, n_layer = 2^63 − 1, vocab_size = 2^31 on a small
// machine) is one line with the arithmetic instead of std::bad_alloc from deep inside a constructor.
//
// Counts are long doubles: exact to 2^64 and never overflowing, so a count beyond int64 is reported rather
// than wrapped. validate() refuses a model whose sizes do not fit 64-bit arithmetic (check_model_sizes); the
// trainer and `meshtrain eval`, which know their device, compare this rank's share of the state with the
// device's memory (check_fits_device).
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/core/config.h"

namespace meshtrain {

struct ModelSize {
  long double params = 0;  // parameter count of the whole model
  std::string arithmetic;  // how params was computed, with the config's numbers: "tok_embed 256 × 64 + …"
};

// The parameter count of model/transformer.cpp's model for `m` (resolved or not: 0 = derived as resolve()
// does).
ModelSize model_size(const ModelConfig& m);

// UserError "FILE: model: … parameters … more than 64-bit sizes hold" when the training state (16 bytes per
// parameter) or one micro-batch's logits (micro_batch_size × seq_len × vocab_size fp32) exceed int64 bytes.
void check_model_sizes(const Config& cfg);

// UserError when this rank's share of the state exceeds `device_bytes`: with `training`, fp32 weights,
// gradients and AdamW moments (16 bytes per parameter) divided as parallel.{tp, fsdp, zero_stage} shard
// them, less what optimizer offload keeps on the host (the moments; the gradients where they stream:
// core/gradient_streaming.h); otherwise the weights alone. A lower bound (activations come on top), so it
// never refuses a model that fits. `cfg` resolved for the world size.
void check_fits_device(const Config& cfg, bool training, int64_t device_bytes, const std::string& device);

}  // namespace meshtrain
