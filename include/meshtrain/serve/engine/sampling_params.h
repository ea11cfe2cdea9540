// SamplingParams: how one request's next tokens are drawn (docs/serving.md "Sampler"), OpenAI's fields.
#pragma once

#include <cstdint>

#include "meshtrain/serve/request.h"

namespace meshtrain::serve {

struct SamplingParams {
  double temperature = 1.0;          // 0 = greedy (argmax)
  int64_t top_k = 0;                 // keep the k most likely tokens; 0 = the whole vocabulary
  double top_p = 1.0;                // keep the most likely tokens whose mass reaches top_p (nucleus); 1 = all
  double repetition_penalty = 1.0;   // > 1 discourages the tokens already in the sequence (prompt included)
  uint64_t seed = 0;                 // the draws are a function of (seed, token index) only

  bool greedy() const { return temperature <= 0; }
};

// UserError naming the request and the field when a value is out of range.
void check_sampling_params(RequestId id, const SamplingParams& p);

}  // namespace meshtrain::serve
