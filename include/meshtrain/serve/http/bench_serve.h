// `meshtrain bench serve`: a load generator for an OpenAI-compatible server (docs/serving.md "meshtrain bench
// serve"). At each concurrency level C, C client threads, each on one keep-alive connection (http_client.h),
// send N streamed /v1/completions requests between them, greedy, and time every token as it arrives
// (sse_parser.h); bench_serve_stats.h turns the times into throughput and latency percentiles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/serve/http/bench_serve_stats.h"
#include "meshtrain/serve/http/http_client.h"

namespace meshtrain::serve::http {

struct BenchPrompt {
  nlohmann::json prompt;   // token ids (an array of integers) or text
  int64_t max_tokens = 0;  // tokens asked for
};

struct BenchServeOptions {
  HttpUrl url;
  std::vector<int> concurrency = {1, 8, 64};
  int64_t requests = 0;  // per level; 0: 2 × the level's concurrency, at least 4
  int64_t prompt_tokens = 128;   // random prompts: their length in token ids
  int64_t output_tokens = 128;   // max_tokens (a JSONL line may set its own)
  int64_t vocab = 256;           // random prompts: ids drawn from [0, vocab)
  std::vector<BenchPrompt> prompts;  // from a JSONL file, taken in turn; empty: random prompts
  std::string prompts_file;          // where they came from (for the report)
  std::string model;                 // the `model` sent; empty: the first one /v1/models lists
  uint64_t seed = 0;                 // of the random prompts
  int64_t warmup = 1;                // requests sent one by one before the first level, not timed
  double timeout_s = 600;            // for any one connect or read

  int64_t requests_at(int concurrency) const;
};

struct BenchServeResult {
  std::string model;  // the first id /v1/models lists
  std::vector<LevelSummary> levels;
  int64_t failed() const;
};

// One prompt per non-blank line: {"prompt": "text" or [ids], "max_tokens": N (optional, else
// `default_max_tokens`)}; other keys are ignored. UserError naming PATH:LINE and what is valid.
std::vector<BenchPrompt> load_prompts_jsonl(const std::string& path, int64_t default_max_tokens);

// Random prompt number `index` (counted over the whole run, warm-up first): `prompt_tokens` ids from (seed,
// index), so no two requests share a prefix and the server's prefix cache cannot shorten a prefill.
BenchPrompt random_prompt(const BenchServeOptions& o, int64_t index);

// Asks /v1/models for the model's name, runs the warm-up and every level. Error (one line) when the server cannot
// be reached or the warm-up fails; a failed request of a level is counted in its summary instead.
BenchServeResult run_bench_serve(const BenchServeOptions& o);

std::string bench_serve_table(const BenchServeResult& r, const BenchServeOptions& o);
// The levels, the flags, the model and the machine the client ran on.
std::string bench_serve_json(const BenchServeResult& r, const BenchServeOptions& o);

}  // namespace meshtrain::serve::http
