// Initial parameter values as a function of (model config, seed, parameter name) alone — not of the order
// parameters are visited, nor of how the model is laid out over ranks. Every parameter draws from its own
// generator, seeded by the run's seed and a hash of its name, on the device that holds it. So a replicated
// model, an FSDP shard and a tensor-parallel block of the same run hold the same numbers for the same
// elements (on one device type: CPU and CUDA generators differ).
//
// Rules (GPT-2 / nanoGPT, also used for Llama here): N(0, 0.02) for weights and embeddings, zeros for biases,
// ones for norm weights (zeros for norm biases), and N(0, 0.02/√(2·n_layer)) for the projections that write
// into the residual stream (attn.wo, mlp.proj, mlp.w2). LoRA adapters as PEFT: A U(-1/√in, 1/√in), B zero.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::model {

// Fills `full` (the whole parameter `name`, on any real device) with its initial value.
void init_parameter(const ModelConfig& cfg, const std::string& name, at::Tensor& full, int64_t seed);

// Fills `block` with the block at `offsets` of parameter `name`'s initial value, whose shape is
// `global_shape`. Generates the whole parameter on block's device, one parameter at a time (the peak is the
// largest parameter, not the model), then copies the block out.
void init_parameter_block(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& global_shape,
                          const std::vector<int64_t>& offsets, at::Tensor& block, int64_t seed);

}  // namespace meshtrain::model
