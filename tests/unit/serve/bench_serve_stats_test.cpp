// bench_serve_stats.h: the percentiles (numpy's linear interpolation, as serve_compare.py), the gaps between
// tokens with a chunk's gap split over its tokens, and one level's summary from hand-made request records.
#include "meshtrain/serve/http/bench_serve_stats.h"

#include <gtest/gtest.h>

namespace meshtrain::serve::http {
namespace {

TEST(BenchServeStats, PercentileInterpolatesBetweenClosestRanks) {
  EXPECT_FALSE(percentile({}, 50).has_value());
  EXPECT_DOUBLE_EQ(*percentile({7}, 99), 7);
  const std::vector<double> xs = {4, 1, 3, 2};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(*percentile(xs, 0), 1);
  EXPECT_DOUBLE_EQ(*percentile(xs, 50), 2.5);   // numpy.percentile([1, 2, 3, 4], 50)
  EXPECT_DOUBLE_EQ(*percentile(xs, 90), 3.7);   // (4 − 1) × 0.9 = 2.7: 3 + 0.7 × (4 − 3)
  EXPECT_DOUBLE_EQ(*percentile(xs, 99), 3.97);
  EXPECT_DOUBLE_EQ(*percentile(xs, 100), 4);
}

TEST(BenchServeStats, PercentilesAreOrdered) {
  std::vector<double> xs;
  for (int i = 0; i < 1000; ++i) xs.push_back((i * 7919) % 1000 / 10.0);
  const Percentiles p = percentiles(xs);
  EXPECT_LE(*p.p50, *p.p90);
  EXPECT_LE(*p.p90, *p.p99);
  EXPECT_NEAR(*p.p50, 49.95, 1e-9);
}

TEST(BenchServeStats, ChunkGapIsSplitOverItsTokens) {
  // The first chunk is the time to first token; its second token has no gap of its own.
  const std::vector<TokenArrival> a = {{0.1, 2}, {0.3, 1}, {0.6, 3}, {0.6, 0}};
  const std::vector<double> gaps = inter_token_gaps(a);
  ASSERT_EQ(gaps.size(), 4u);
  EXPECT_NEAR(gaps[0], 0.2, 1e-12);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(gaps[i], 0.1, 1e-12);
  EXPECT_TRUE(inter_token_gaps({{0.5, 4}}).empty());
}

RequestRecord record(double sent, std::vector<TokenArrival> arrivals, double end, int64_t asked) {
  RequestRecord r;
  r.ok = true;
  r.sent_s = sent;
  r.arrivals = std::move(arrivals);
  r.end_s = end;
  r.tokens_requested = asked;
  return r;
}

TEST(BenchServeStats, LevelSummary) {
  std::vector<RequestRecord> rs = {
      record(0.0, {{0.1, 1}, {0.2, 1}, {0.3, 1}}, 0.3, 3),
      record(0.5, {{0.2, 1}, {0.4, 2}}, 0.5, 3),  // ends at 1.0: the level's wall time
      record(0.1, {{0.3, 1}}, 0.3, 3),            // ended early: 1 token of 3
  };
  RequestRecord failed = record(0.2, {{0.05, 1}}, 0.4, 3);
  failed.ok = false;
  failed.error = "HTTP 503: the waiting queue is full";
  rs.insert(rs.begin() + 1, failed);
  RequestRecord second_failure = failed;
  second_failure.error = "a later failure";
  rs.push_back(second_failure);

  const LevelSummary s = summarize_level(4, rs);
  EXPECT_EQ(s.concurrency, 4);
  EXPECT_EQ(s.requests, 5);
  EXPECT_EQ(s.ok, 3);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.first_error, "HTTP 503: the waiting queue is full");  // the first in sending order
  EXPECT_EQ(s.tokens_requested, 15);
  EXPECT_EQ(s.output_tokens, 3 + 3 + 1 + 1 + 1);  // what came, failed requests' tokens included
  EXPECT_EQ(s.ended_early, 1);
  EXPECT_DOUBLE_EQ(s.wall_s, 1.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 9.0);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 3.0);
  // Over the requests that succeeded: first tokens at 0.1, 0.2, 0.3; gaps 0.1, 0.1, 0.1, 0.1; ends 0.3, 0.5, 0.3.
  EXPECT_NEAR(*s.ttft_s.p50, 0.2, 1e-12);
  EXPECT_NEAR(*s.ttft_s.p90, 0.28, 1e-12);
  EXPECT_NEAR(*s.itl_s.p50, 0.1, 1e-12);
  EXPECT_NEAR(*s.itl_s.p99, 0.1, 1e-12);
  EXPECT_NEAR(*s.e2e_s.p50, 0.3, 1e-12);
}

TEST(BenchServeStats, EmptyAndAllFailedLevelsHaveNoLatencies) {
  const LevelSummary none = summarize_level(1, {});
  EXPECT_EQ(none.requests, 0);
  EXPECT_EQ(none.output_tokens_per_s, 0);
  RequestRecord r;
  r.error = "cannot connect";
  const LevelSummary failed = summarize_level(2, {r, r});
  EXPECT_EQ(failed.failed, 2);
  EXPECT_FALSE(failed.ttft_s.p50.has_value());
  EXPECT_FALSE(failed.itl_s.p50.has_value());
}

}  // namespace
}  // namespace meshtrain::serve::http
