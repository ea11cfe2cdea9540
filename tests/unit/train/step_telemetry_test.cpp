// Step telemetry in one process: the straggler rule against hand-computed cases, GPU readings from a fixture
// node into the record and the console line, a throttling GPU warned about by rank and cause, and no "gpu"
// entry at all when there is no GPU.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/gpu_sensors_json.h"
#include "meshtrain/train/step_telemetry.h"

using namespace meshtrain;
using namespace meshtrain::train;

namespace {
std::string fixture(const std::string& name) { return meshtrain::cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/gpu_health/", name, ".json"); }
}  // namespace

TEST(Straggler, SlowestRankAboveTheMedianByMoreThanTheThreshold) {
  // median of {0.10, 0.10, 0.11, 0.15} = 0.105; 0.15 / 0.105 − 1 = 42.9 %
  auto s = find_straggler({0.10, 0.15, 0.10, 0.11}, 0.2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 1);
  EXPECT_DOUBLE_EQ(s->median, 0.105);
  EXPECT_NEAR(s->excess(), 0.15 / 0.105 - 1, 1e-12);
  EXPECT_FALSE(find_straggler({0.10, 0.15, 0.10, 0.11}, 0.5).has_value());  // 42.9 % ≤ 50 %
  EXPECT_FALSE(find_straggler({0.10, 0.15, 0.10, 0.11}, 0).has_value());    // disabled
  EXPECT_FALSE(find_straggler({0.5}, 0.2).has_value());                     // one rank: nobody to compare
  // Odd count: the middle value. {1, 1, 3}: median 1, rank 2 is 200 % above.
  EXPECT_EQ(find_straggler({1, 1, 3}, 0.2)->rank, 2);
}

TEST(StepTelemetry, FixtureGpuReadingsReachTheRecordAndTheConsole) {
  StepTelemetry t({.rank = 0, .world_size = 1, .local_world_size = 1, .pci_bus_id = "00000000:AB:00.0"}, nullptr,
                  hw::load_gpu_sensors(fixture("hgx_h100_faults")));
  const auto s = t.gather(7, 0.5, 0.4);
  const auto& g = s.record.at("gpu").at("0");
  EXPECT_FLOAT_EQ(g.at("power_w").get<float>(), 76.5f);
  EXPECT_FLOAT_EQ(g.at("temperature_c").get<float>(), 88.f);
  EXPECT_FLOAT_EQ(g.at("sm_clock_mhz").get<float>(), 1980.f);
  EXPECT_FLOAT_EQ(g.at("memory_used_mib").get<float>(), 528.f);
  EXPECT_TRUE(g.at("throttled").get<bool>());
  EXPECT_FLOAT_EQ(s.record.at("nodes").at("0").at("power_w").get<float>(), 76.5f);
  EXPECT_EQ(s.console, " | 88°C max, 76 W");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(s.warnings[0], "step 7: rank 0's GPU is throttling (thermal, power cap)");
  EXPECT_FLOAT_EQ(s.record.at("ranks").at("compute_time_s")[0].get<float>(), 0.4f);
}

TEST(StepTelemetry, WithoutAGpuNoReadingsAtAll) {
  StepTelemetry t({.rank = 0, .world_size = 1, .local_world_size = 1, .pci_bus_id = ""}, nullptr);
  const auto s = t.gather(1, 0.5, 0.5);
  EXPECT_FALSE(s.record.contains("gpu"));
  EXPECT_FALSE(s.record.contains("nodes"));
  EXPECT_EQ(s.console, "");
  EXPECT_TRUE(s.warnings.empty());
  // A GPU NVML does not know (a bus id absent from the readings): the same.
  StepTelemetry u({.pci_bus_id = "0000:99:00.0"}, nullptr, hw::load_gpu_sensors(fixture("hgx_h100_healthy")));
  EXPECT_FALSE(u.gather(1, 0.5, 0.5).record.contains("gpu"));
}
