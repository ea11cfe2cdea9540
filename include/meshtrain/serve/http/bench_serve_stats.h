// The figures of `meshtrain bench serve` (docs/serving.md "meshtrain bench serve"): what each streamed request
// recorded turned into its time to first token, its gaps between tokens and its end-to-end time, and one
// concurrency level's summary. Arithmetic on recorded times only (no I/O), so it is unit-tested on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::serve::http {

// A stream chunk that carried tokens: when it arrived (seconds after the request was sent) and how many.
struct TokenArrival {
  double at_s = 0;
  int64_t tokens = 0;
};

// One request as the client saw it.
struct RequestRecord {
  bool ok = false;
  std::string error;             // why it failed, one line (a status other than 200, a broken stream, ...)
  int64_t tokens_requested = 0;  // its max_tokens
  double sent_s = 0;             // when it was sent, on the level's clock
  double end_s = 0;              // when its stream ended, seconds after it was sent
  std::vector<TokenArrival> arrivals;  // in order
  int64_t tokens() const;        // the tokens received
};

// The q-th percentile (0 to 100) of `samples`, linear between the closest ranks (numpy's default, as
// scripts/bench/serve_compare.py computes it); nullopt for no samples.
std::optional<double> percentile(std::vector<double> samples, double q);

struct Percentiles {
  std::optional<double> p50, p90, p99;
};
Percentiles percentiles(const std::vector<double>& samples);

// A request's gaps between tokens: the time before each later chunk, split evenly over the tokens it carries
// (a chunk of k tokens after a gap g gives k gaps of g / k). The first chunk's time is the time to first token,
// and any more tokens it carries have no gap of their own.
std::vector<double> inter_token_gaps(const std::vector<TokenArrival>& arrivals);

// One concurrency level: every figure in seconds except the rates.
struct LevelSummary {
  int concurrency = 0;
  int64_t requests = 0, ok = 0, failed = 0;
  std::string first_error;  // of the first failed request in sending order; empty when none failed
  int64_t tokens_requested = 0, output_tokens = 0;
  int64_t ended_early = 0;  // requests that finished fine with fewer tokens than asked (an end-of-text token)
  double wall_s = 0;        // from the first request's send to the last one's end
  double output_tokens_per_s = 0, requests_per_s = 0;  // all tokens received, requests that succeeded / wall_s
  Percentiles ttft_s, itl_s, e2e_s;  // over the requests that succeeded
};

// `records` in sending order.
LevelSummary summarize_level(int concurrency, const std::vector<RequestRecord>& records);

}  // namespace meshtrain::serve::http
