// generate_all: a batch of requests through the scheduler and the engine until every one has finished — the
// serving loop without a server, for tests and offline generation (`meshtrain generate`, later the server's
// engine thread).
#pragma once

#include <vector>

#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/sampling_params.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

struct GenerationRequest {
  Request request;
  SamplingParams sampling;
};

struct GenerateOptions {
  SchedulerOptions scheduler;       // the cache's size, the step budget, the batch's rows
  std::vector<TokenId> eos_tokens;  // sampling one ends a request (kStop)
  bool cuda_graphs = true;          // decode steps as CUDA graphs on CUDA (EngineOptions::cuda_graphs)
};

// The engine's options for `options`: its EOS ids, and graphs of 1, 2, 4, … up to the scheduler's max_running.
EngineOptions engine_options(const GenerateOptions& options);

struct GenerationResult {
  RequestId id = 0;
  std::vector<TokenId> tokens;  // the generated tokens (the prompt not repeated), an EOS included
  FinishReason reason = FinishReason::kLength;
};

// The results in the order of `requests`; `stats` (optional) gets the scheduler's counters. UserError for a bad
// request or option, before any step runs.
std::vector<GenerationResult> generate_all(model::Transformer& model, const std::vector<GenerationRequest>& requests,
                                           const GenerateOptions& options, SchedulerStats* stats = nullptr);

}  // namespace meshtrain::serve
