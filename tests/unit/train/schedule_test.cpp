#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/train/lr_schedule.h"

using namespace meshtrain;

namespace {
ScheduleConfig sched(const std::string& kind, int64_t warmup, double min_ratio = 0.1, double decay = 0.2) {
  ScheduleConfig s;
  s.kind = parse_enum<LrShape>(kind, "schedule.kind");
  s.warmup_steps = warmup;
  s.min_lr_ratio = min_ratio;
  s.decay_fraction = decay;
  return s;
}
}  // namespace

TEST(LrSchedule, WarmupIsLinearAndNeverZero) {
  train::LrSchedule s(sched("cosine", 10), 1.0, 100);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(4), 0.5);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
}

TEST(LrSchedule, CosineEndsAtTheFloorAndIsHalfwayInTheMiddle) {
  train::LrSchedule s(sched("cosine", 10), 2.0, 111);  // decay spans steps 10..110
  EXPECT_DOUBLE_EQ(s.at(10), 2.0);
  EXPECT_NEAR(s.at(60), 0.2 + 0.5 * 1.8, 1e-12);
  EXPECT_NEAR(s.at(110), 0.2, 1e-12);
  EXPECT_NEAR(s.at(500), 0.2, 1e-12);  // past the end: stays at the floor
}

TEST(LrSchedule, LinearConstantAndWsd) {
  train::LrSchedule lin(sched("linear", 0, 0.0), 1.0, 101);
  EXPECT_NEAR(lin.at(50), 0.5, 1e-12);
  EXPECT_NEAR(lin.at(100), 0.0, 1e-12);
  train::LrSchedule cst(sched("constant", 5), 3.0, 100);
  EXPECT_DOUBLE_EQ(cst.at(99), 3.0);
  train::LrSchedule wsd(sched("wsd", 10, 0.0, 0.2), 1.0, 100);  // decay over the last 20 steps
  EXPECT_DOUBLE_EQ(wsd.at(79), 1.0);
  EXPECT_NEAR(wsd.at(80), 1.0 - 1.0 / 20, 1e-12);
  EXPECT_NEAR(wsd.at(99), 0.0, 1e-12);
}
