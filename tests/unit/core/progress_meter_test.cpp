// ProgressMeter: silent for quick work, a line with bytes, rate and time left once the threshold passes
// (lowered to 0 here through the environment, as the e2e tests do), and a closing line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "meshtrain/core/progress_meter.h"

using namespace meshtrain;

TEST(ProgressMeter, QuickWorkPrintsNothing) {
  unsetenv("MESHTRAIN_PROGRESS_AFTER_S");
  unsetenv("MESHTRAIN_PROGRESS_EVERY_S");
  std::vector<std::string> lines;
  ProgressMeter m("load", 1000, [&](const std::string& l) { lines.push_back(l); });
  m.add(1000);
  m.report();
  m.finish();
  EXPECT_TRUE(lines.empty());
}

TEST(ProgressMeter, LinesOnceTheThresholdPasses) {
  setenv("MESHTRAIN_PROGRESS_AFTER_S", "0", 1);
  setenv("MESHTRAIN_PROGRESS_EVERY_S", "0", 1);
  std::vector<std::string> lines;
  {
    ProgressMeter m("import: read", 4'000'000'000ull, [&](const std::string& l) { lines.push_back(l); });
    m.add(1'000'000'000ull);
    m.report();
    m.add(3'000'000'000ull);
    m.finish();
  }
  unsetenv("MESHTRAIN_PROGRESS_AFTER_S");
  unsetenv("MESHTRAIN_PROGRESS_EVERY_S");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("import: read: 1.0 / 4.0 GB (25%), ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" GB/s, "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" left"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("import: read: 4.0 / 4.0 GB (100%), ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("done in "), std::string::npos) << lines[1];
}

TEST(ProgressMeter, AtMostOneLinePerPeriod) {
  setenv("MESHTRAIN_PROGRESS_AFTER_S", "0", 1);
  setenv("MESHTRAIN_PROGRESS_EVERY_S", "3600", 1);
  std::vector<std::string> lines;
  ProgressMeter m("load", 100, [&](const std::string& l) { lines.push_back(l); });
  for (int i = 0; i < 10; ++i) {
    m.add(10);
    m.report();
  }
  unsetenv("MESHTRAIN_PROGRESS_AFTER_S");
  unsetenv("MESHTRAIN_PROGRESS_EVERY_S");
  EXPECT_EQ(lines.size(), 1u);
}
