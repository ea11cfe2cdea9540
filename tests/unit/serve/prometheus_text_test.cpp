// Prometheus text (serve/http/prometheus_text.h) parsed back as a scraper reads it: HELP and TYPE lines, a
// histogram's cumulative `le` buckets ending at +Inf == _count, and _sum; LatencyHistogram's bucket boundaries.
#include "meshtrain/serve/http/prometheus_text.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace meshtrain::serve::http {
namespace {

// The sample lines of one exposition: name (with its labels) → value; the comment lines apart.
struct Parsed {
  std::vector<std::string> comments;
  std::vector<std::pair<std::string, double>> samples;
};

Parsed parse(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind('#', 0) == 0) {
      p.comments.push_back(line);
      continue;
    }
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    p.samples.emplace_back(line.substr(0, space), std::stod(line.substr(space + 1)));
  }
  return p;
}

TEST(PrometheusText, GaugeAndCounter) {
  const Parsed p = parse(prometheus_metric("requests_running", "gauge", "Requests holding KV blocks.", 3));
  EXPECT_EQ(p.comments, (std::vector<std::string>{"# HELP meshtrain_requests_running Requests holding KV blocks.",
                                                  "# TYPE meshtrain_requests_running gauge"}));
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0], (std::pair<std::string, double>{"meshtrain_requests_running", 3}));
}

TEST(PrometheusText, FractionalGauge) {
  const Parsed p = parse(prometheus_gauge("generation_tokens_per_second", "Tokens generated per second.", 1234.5678));
  EXPECT_EQ(p.comments[1], "# TYPE meshtrain_generation_tokens_per_second gauge");
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].first, "meshtrain_generation_tokens_per_second");
  EXPECT_DOUBLE_EQ(p.samples[0].second, 1234.57);
  EXPECT_EQ(parse(prometheus_gauge("r", "none yet", 0)).samples[0].second, 0.0);
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndEndAtInf) {
  LatencyHistogram h;
  for (double s : {0.0005, 0.001, 0.003, 0.2, 0.2, 7.0, 100.0}) h.observe(s);
  const Parsed p = parse(prometheus_histogram("time_to_first_token_seconds", "Time to first token.", h));
  EXPECT_EQ(p.comments.back(), "# TYPE meshtrain_time_to_first_token_seconds histogram");
  ASSERT_EQ(p.samples.size(), LatencyHistogram::kBounds.size() + 3);  // the buckets, +Inf, _sum, _count
  std::map<std::string, double> by_name(p.samples.begin(), p.samples.end());
  const std::string b = "meshtrain_time_to_first_token_seconds_bucket";
  EXPECT_EQ(by_name.at(b + "{le=\"0.001\"}"), 2);   // 0.0005 and 0.001 (le: at most)
  EXPECT_EQ(by_name.at(b + "{le=\"0.0025\"}"), 2);
  EXPECT_EQ(by_name.at(b + "{le=\"0.005\"}"), 3);
  EXPECT_EQ(by_name.at(b + "{le=\"0.25\"}"), 5);
  EXPECT_EQ(by_name.at(b + "{le=\"10\"}"), 6);
  EXPECT_EQ(by_name.at(b + "{le=\"60\"}"), 6);
  EXPECT_EQ(by_name.at(b + "{le=\"+Inf\"}"), 7);
  EXPECT_EQ(by_name.at("meshtrain_time_to_first_token_seconds_count"), 7);
  EXPECT_NEAR(by_name.at("meshtrain_time_to_first_token_seconds_sum"), 107.4045, 1e-9);
  double last = 0;
  for (size_t i = 0; i <= LatencyHistogram::kBounds.size(); ++i) {  // in order, never decreasing
    EXPECT_EQ(p.samples[i].first.rfind(b + "{le=\"", 0), 0u) << p.samples[i].first;
    EXPECT_GE(p.samples[i].second, last);
    last = p.samples[i].second;
  }
}

TEST(PrometheusText, EmptyHistogramHasEveryLine) {
  const Parsed p = parse(prometheus_histogram("x_seconds", "x.", LatencyHistogram{}));
  ASSERT_EQ(p.samples.size(), LatencyHistogram::kBounds.size() + 3);
  for (const auto& [name, value] : p.samples) EXPECT_EQ(value, 0) << name;
}

}  // namespace
}  // namespace meshtrain::serve::http
