// The logits a model gives every position of a prompt, in one forward pass: what `meshtrain generate --logits`
// writes to compare a checkpoint with transformers on the same tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

// fp32 logits [T, V] of `ids` (T ≥ 1 tokens) on the CPU, in eval mode (no dropout) and without autograd; the
// model's training mode is left as it was.
at::Tensor prompt_logits(Transformer& model, const std::vector<int64_t>& ids);

}  // namespace meshtrain::model
