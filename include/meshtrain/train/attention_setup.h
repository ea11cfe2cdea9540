// The run's attention kernel (train.attention_backend): checked against the shape this rank's attention
// will have — heads per tensor-parallel rank, the micro-batch, the sequence, the compute dtype, the device,
// packed documents — before the first step, then ATen's SDPA restricted to it for the process
// (model/attention_backend.h). A backend that cannot run the shape is one UserError line (exit 2) listing
// the ones that can.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

// bf16: the compute dtype (autocast); documents: the training data packs several documents per sequence.
void setup_attention_backend(const Config& cfg, const at::Device& device, bool bf16, bool documents);

}  // namespace meshtrain::train
