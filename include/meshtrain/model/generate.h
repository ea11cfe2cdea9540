// Autoregressive sampling with a KV cache: one prefill of the prompt, then one token per step.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = whole vocabulary
  uint64_t seed = 1337;
  std::vector<int64_t> stop_tokens;       // sampling one of these ends generation (it is returned too)
  std::function<void(int64_t)> on_token;  // called with each sampled token as it comes (streaming)
};

// Returns the prompt followed by the sampled tokens; stops early at the model's max_seq_len or a stop token.
std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt, const SampleOptions& opts);

}  // namespace meshtrain::model
