// TokenRate: tokens per second over a sliding window (docs/serving.md "Metrics"), for /metrics' throughput gauges:
// the tokens of the steps that ended in the last `window` divided by the window, so the figure ramps up over a
// server's first window and falls to zero once it idles for a window. Plain data, no clock of its own: the caller
// passes the time of each step and of the reading, which makes it testable without waiting.
//
//   TokenRate rate;                              // a 10 s window
//   rate.add(now, tokens_this_step);
//   double tok_s = rate.per_second(now);
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>

namespace meshtrain::serve {

class TokenRate {
 public:
  using Clock = std::chrono::steady_clock;

  explicit TokenRate(Clock::duration window = std::chrono::seconds(10)) : window_(window) {}

  // `tokens` at `t` (times in order); steps older than the window are dropped.
  void add(Clock::time_point t, int64_t tokens);
  // The tokens added in (now − window, now], per second of the window.
  double per_second(Clock::time_point now) const;

 private:
  Clock::duration window_;
  std::deque<std::pair<Clock::time_point, int64_t>> steps_;
};

}  // namespace meshtrain::serve
