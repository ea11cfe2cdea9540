// The sampler (docs/serving.md "Sampler"): one token per row of a step's logits, on the logits' device —
// repetition penalty, temperature, top-k, top-p, then a draw by inverse CDF from a uniform that is a function
// of the request's seed and the token's index alone. A request therefore samples the same tokens whatever batch
// it runs in, and again after a preemption recomputes it. The sampled ids are the only copy to the host.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

#include "meshtrain/serve/block_pool.h"
#include "meshtrain/serve/engine/sampling_params.h"

namespace meshtrain::serve {

// One row of the logits to sample.
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const TokenId> history;  // the sequence's tokens so far (repetition penalty); not empty
  int64_t draw_index = 0;            // the index of the token being sampled among the request's generated ones
};

// The uniform in [0, 1) that draw `index` of a request seeded `seed` uses (counter-based: no state).
double sampling_uniform(uint64_t seed, int64_t index);

// Whether sample_tokens picks each of `rows` as the logits' argmax: every row greedy without a repetition
// penalty (the common case; a CUDA graph may then take the argmax itself: serve/engine/decode_graphs.h).
bool argmax_samples(std::span<const SampleRow> rows);

// logits [B, V] (any float dtype) → one token id per row.
std::vector<TokenId> sample_tokens(const at::Tensor& logits, std::span<const SampleRow> rows);

}  // namespace meshtrain::serve
