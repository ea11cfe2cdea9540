#include "meshtrain/serve/http/bench_serve_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshtrain::serve::http {

int64_t RequestRecord::tokens() const {
  int64_t n = 0;
  for (const auto& a : arrivals) n += a.tokens;
  return n;
}

std::optional<double> percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return std::nullopt;
  std::sort(samples.begin(), samples.end());
  const double rank = static_cast<double>(samples.size() - 1) * std::clamp(q, 0.0, 100.0) / 100.0;
  const auto lo = static_cast<size_t>(std::floor(rank)), hi = static_cast<size_t>(std::ceil(rank));
  return samples[lo] + (samples[hi] - samples[lo]) * (rank - static_cast<double>(lo));
}

Percentiles percentiles(const std::vector<double>& samples) {
  return {percentile(samples, 50), percentile(samples, 90), percentile(samples, 99)};
}

std::vector<double> inter_token_gaps(const std::vector<TokenArrival>& arrivals) {
  std::vector<double> gaps;
  for (size_t i = 1; i < arrivals.size(); ++i) {
    const int64_t k = arrivals[i].tokens;
    const double gap = arrivals[i].at_s - arrivals[i - 1].at_s;
    gaps.insert(gaps.end(), static_cast<size_t>(std::max<int64_t>(k, 0)), k > 0 ? gap / static_cast<double>(k) : 0);
  }
  return gaps;
}

LevelSummary summarize_level(int concurrency, const std::vector<RequestRecord>& records) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.requests = static_cast<int64_t>(records.size());
  std::vector<double> ttft, itl, e2e;
  double first_sent = std::numeric_limits<double>::infinity(), last_end = -first_sent;
  for (const RequestRecord& r : records) {
    first_sent = std::min(first_sent, r.sent_s);
    last_end = std::max(last_end, r.sent_s + r.end_s);
    s.tokens_requested += r.tokens_requested;
    s.output_tokens += r.tokens();
    if (!r.ok) {
      if (s.failed++ == 0) s.first_error = r.error;
      continue;
    }
    ++s.ok;
    if (r.tokens() < r.tokens_requested) ++s.ended_early;
    if (!r.arrivals.empty()) ttft.push_back(r.arrivals.front().at_s);
    const std::vector<double> gaps = inter_token_gaps(r.arrivals);
    itl.insert(itl.end(), gaps.begin(), gaps.end());
    e2e.push_back(r.end_s);
  }
  s.wall_s = records.empty() ? 0 : last_end - first_sent;
  if (s.wall_s > 0) {
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.wall_s;
    s.requests_per_s = static_cast<double>(s.ok) / s.wall_s;
  }
  s.ttft_s = percentiles(ttft);
  s.itl_s = percentiles(itl);
  s.e2e_s = percentiles(e2e);
  return s;
}

}  // namespace meshtrain::serve::http
