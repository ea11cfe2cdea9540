// TokenRate (serve/engine/token_rate.h): the tokens of the steps inside the window, per second of the window, at
// given times (no clock: deterministic).
#include <gtest/gtest.h>

#include <chrono>

#include "meshtrain/serve/engine/token_rate.h"

namespace meshtrain::serve {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(TokenRate, TokensInsideTheWindowPerSecondOfIt) {
  const TokenRate::Clock::time_point t0{};
  TokenRate rate(seconds(10));
  EXPECT_EQ(rate.per_second(t0), 0.0);
  rate.add(t0 + seconds(1), 100);
  rate.add(t0 + seconds(5), 60);
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(5)), 16.0);  // 160 tokens in the last 10 s
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(12)), 6.0);  // the first step left the window
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + milliseconds(14999)), 6.0);
  EXPECT_EQ(rate.per_second(t0 + seconds(15)), 0.0);         // idle for a whole window
  rate.add(t0 + seconds(30), 20);                            // drops the old steps as it goes
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(30)), 2.0);
  EXPECT_EQ(rate.per_second(t0 + seconds(29)), 0.0) << "a step after the reading does not count";
}

}  // namespace
}  // namespace meshtrain::serve
