// generate_all: a batch of requests through the scheduler and the engine until every one has finished — the
// serving loop without a server, for tests and offline generation (`meshtrain generate`, later the server's
// engine thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

// How far a generate_all run has come, after each step.
struct GenerateProgress {
  size_t finished = 0;           // requests finished
  size_t total = 0;              // requests given
  int64_t generated_tokens = 0;  // tokens sampled so far, every request together
};

struct GenerateOptions {
  SchedulerOptions scheduler;       // the cache's size, the step budget, the batch's rows
  std::vector<TokenId> eos_tokens;  // sampling one ends a request (kStop)
  // Called with each sampled token that is not an EOS (the request's index in `requests`, the token) before the
  // scheduler sees it; true ends the request with that token (kStop): stop strings, which need the decoded text,
  // end a request there instead of generating to max_new_tokens. Calls follow each request's token order.
  std::function<bool(size_t index, TokenId token)> stop_at;
  // Called after every step (progress display).
  std::function<void(const GenerateProgress&)> on_step;
  bool cuda_graphs = true;          // decode steps as CUDA graphs on CUDA (EngineOptions::cuda_graphs)
  // Rank 0 of a tensor-parallel group (EngineOptions::tp): the other ranks follow each step. Null: one process.
  std::shared_ptr<TensorParallelSteps> tp;
};

// The engine's options for `options`: its EOS ids, graphs of 1, 2, 4, … up to the scheduler's max_running, its
// tensor-parallel group.
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
