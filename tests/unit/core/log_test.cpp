#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

using namespace meshtrain;

TEST(Log, ParsesEveryLevelAndRejectsOthers) {
  for (auto name : {"trace", "debug", "info", "warn", "error", "off"})
    EXPECT_EQ(log::level_name(log::parse_level(name)), name);
  try {
    log::parse_level("verbose");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("trace, debug, info, warn, error, off"), std::string::npos);
  }
}

TEST(Log, LevelFiltersAndEnvOverrides) {
  log::init({.rank = 3, .level = log::Level::Warn});
  EXPECT_FALSE(log::enabled(log::Level::Info));
  EXPECT_TRUE(log::enabled(log::Level::Error));
  setenv("MESHTRAIN_LOG_LEVEL", "debug", 1);
  log::init({.rank = 3, .level = log::Level::Warn});
  unsetenv("MESHTRAIN_LOG_LEVEL");
  EXPECT_TRUE(log::enabled(log::Level::Debug));
  EXPECT_FALSE(log::enabled(log::Level::Trace));
  EXPECT_EQ(log::options().rank, 3);
}

TEST(Log, RankPrefixAndProgressOnRankZeroOnly) {
  testing::internal::CaptureStderr();
  log::init({.rank = 2, .level = log::Level::Info});
  log::info("hello %d", 42);
  log::progress("progress from rank 2");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[rank 2] hello 42"), std::string::npos) << err;
  EXPECT_EQ(err.find("progress from rank 2"), std::string::npos) << err;

  testing::internal::CaptureStderr();
  log::init({.rank = 2, .level = log::Level::Info, .all_ranks = true});
  log::progress("progress from rank 2");
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("progress from rank 2"), std::string::npos) << err;
  log::init({});
}

TEST(Log, Sprintf) { EXPECT_EQ(log::sprintf("%s=%.2f", "lr", 0.125), "lr=0.12"); }
