// LatencyHistogram: a Prometheus-style histogram of durations in seconds (docs/serving.md "Metrics"), for the
// engine loop's time to first token and time between tokens. Fixed bucket bounds, from 1 ms to 60 s; a sample
// counts in every bucket whose bound is at least its value. Plain data: copied into each metrics snapshot.
#pragma once

#include <array>
#include <cstdint>

namespace meshtrain::serve {

class LatencyHistogram {
 public:
  static constexpr std::array<double, 15> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};

  void observe(double seconds);
  // Samples at most kBounds[i] seconds (cumulative, as Prometheus' `le` buckets).
  int64_t cumulative(size_t i) const { return cumulative_[i]; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<int64_t, kBounds.size()> cumulative_{};
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace meshtrain::serve
