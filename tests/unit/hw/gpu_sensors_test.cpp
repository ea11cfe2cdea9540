// GPU readings and the preflight's node checks: NVML on a machine without a GPU reports readings absent (never
// zeros), fixtures round-trip through JSON, and each check passes a healthy HGX H100 node and names the GPU
// and the fault on one with faults injected (tests/fixtures/gpu_health/).
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/hw/gpu_sensors.h"
#include "meshtrain/hw/gpu_sensors_json.h"
#include "meshtrain/hw/node_checks.h"
#include "meshtrain/hw/topology_json.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::hw;
using meshtrain::testing_support::temp_dir;
using meshtrain::testing_support::user_error;

namespace {

std::string health_fixture(const std::string& name) { return cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/gpu_health/", name, ".json"); }

const CheckRow& find(const std::vector<CheckRow>& rows, const std::string& check) {
  for (const auto& r : rows)
    if (r.check == check) return r;
  throw std::runtime_error("no row " + check);
}

bool has_gpu() { return std::filesystem::exists("/dev/nvidia0"); }

}  // namespace

TEST(GpuSensors, WithoutAGpuEveryReadingIsAbsent) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU (the gpu-labelled e2e test covers it)";
  auto s = nvml_sensors();
  EXPECT_EQ(s->count(), 0);
  EXPECT_FALSE(s->source().empty());
  EXPECT_EQ(s->index_of("0000:07:00.0"), -1);
  const GpuReading r = s->read(0);
  EXPECT_FALSE(r.power_w || r.temperature_c || r.sm_clock_mhz || r.memory_clock_mhz || r.gpu_util_pct ||
               r.memory_util_pct || r.memory_used_bytes || r.memory_total_bytes || r.throttle_reasons);
  const GpuHealth h = s->health(0);
  EXPECT_FALSE(h.ecc_uncorrected_volatile || h.nvlinks_up || h.pcie_width || h.power_limit_w);
  // The checks say why instead of inventing a pass; asking for GPUs fails.
  auto rows = check_gpus(*s, {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, CheckStatus::Skip);
  EXPECT_FALSE(all_passed(check_gpus(*s, {.gpus = 8})));
}

TEST(GpuSensors, FixturesRoundTripThroughJson) {
  auto a = load_gpu_sensors(health_fixture("hgx_h100_faults"));
  ASSERT_EQ(a->count(), 8);
  EXPECT_EQ(a->health(5).nvlinks_up, 17);
  EXPECT_EQ(a->read(5).throttle_reasons, 0x24u);
  EXPECT_FALSE(a->health(0).retired_pages_pending.has_value());  // absent in the file: absent here
  auto b = gpu_sensors_from_json(gpu_sensors_to_json(*a), "again");
  auto gpus_part = [](const GpuSensors& s) {  // the keys print sorted: "gpus" first, "source" last
    const std::string j = gpu_sensors_to_json(s);
    return j.substr(0, j.rfind("\"source\""));
  };
  EXPECT_EQ(gpus_part(*b), gpus_part(*a));
  EXPECT_EQ(b->source(), "fixture again");
  EXPECT_NE(user_error([] { gpu_sensors_from_json(R"({"gpus": [{"name": "x", "power_limit_w": "high"}]})", "f.json"); })
                .find("f.json: gpus[0]: key 'power_limit_w' must be a number"),
            std::string::npos);
}

TEST(GpuSensors, ThrottleCausesAreNamed) {
  EXPECT_EQ(throttle::describe(throttle::kGpuIdle | throttle::kApplicationClocks), "");
  EXPECT_EQ(throttle::describe(throttle::kHwThermal | throttle::kSwPowerCap | throttle::kHwSlowdown),
            "thermal, power cap, HW slowdown");
}

TEST(NodeChecks, HealthyNodePasses) {
  auto s = load_gpu_sensors(health_fixture("hgx_h100_healthy"));
  auto rows = check_gpus(*s, {.gpus = 8, .gpu_model = "H100", .nvlinks = 18});
  EXPECT_TRUE(all_passed(rows)) << format_check_table(rows);
  EXPECT_EQ(find(rows, "NVLink links up").found, "18 on each of 8 GPUs");
  EXPECT_EQ(find(rows, "temperature").found, "38 °C max");
  EXPECT_EQ(format_check_table(rows).find("FAILED"), std::string::npos);
}

TEST(NodeChecks, EachFaultFailsItsRowNamingTheGpu) {
  auto s = load_gpu_sensors(health_fixture("hgx_h100_faults"));
  auto rows = check_gpus(*s, {});
  EXPECT_FALSE(all_passed(rows));
  EXPECT_EQ(find(rows, "GPU count").status, CheckStatus::Pass);
  EXPECT_EQ(find(rows, "ECC / retired pages").found, "GPU 3: 2 uncorrected ECC errors, row remap pending (reset the GPU)");
  EXPECT_EQ(find(rows, "NVLink links up").found, "GPU 5: 17 up, 1 down");
  EXPECT_EQ(find(rows, "PCIe link").found, "GPU 5: x8 of x16");
  EXPECT_EQ(find(rows, "clocks not capped").found, "GPU 5: power limit 500 W of 700 W, throttled: thermal, power cap");
  EXPECT_EQ(find(rows, "temperature").found, "GPU 5: 88 °C > 80 °C");
  const std::string table = format_check_table(rows);
  EXPECT_NE(table.find("FAILED: ECC / retired pages: found GPU 3"), std::string::npos) << table;
  // Asking for more GPUs, another model or another link count fails those rows too.
  auto healthy = load_gpu_sensors(health_fixture("hgx_h100_healthy"));
  auto asked = check_gpus(*healthy, {.gpus = 16, .gpu_model = "A100", .nvlinks = 12});
  EXPECT_EQ(find(asked, "GPU count").status, CheckStatus::Fail);
  EXPECT_EQ(find(asked, "GPU model").status, CheckStatus::Fail);
  EXPECT_EQ(find(asked, "NVLink links up").status, CheckStatus::Fail);
}

TEST(NodeChecks, CheckpointDirAgainstTheCheckpointSize) {
  const std::string dir = (temp_dir("doctor_ckpt") / "ckpt").string();
  const CheckRow ok = check_checkpoint_dir(dir, 1 << 20, 600, 8 << 20);
  EXPECT_EQ(ok.status, CheckStatus::Pass) << ok.found;
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // the probe is gone
  const CheckRow huge = check_checkpoint_dir(dir, int64_t{1} << 60, 600, 8 << 20);
  EXPECT_EQ(huge.status, CheckStatus::Fail);
  EXPECT_NE(huge.found.find("GB free < 2 ×"), std::string::npos) << huge.found;
  const CheckRow slow = check_checkpoint_dir(dir, int64_t{1} << 40, 1e-3, 8 << 20);  // 1 TB in a millisecond
  EXPECT_NE(slow.found.find("s per checkpoint"), std::string::npos) << slow.found;
}

TEST(NodeChecks, AllReduceAgainstTheTopologysRate) {
  const Topology h100 = load_topology(cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/topology/hgx_h100.json"));
  const BusBandwidth e = expected_allreduce_busbw(h100, 8, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(e.gbs, 360);
  EXPECT_EQ(e.why, "NVLink, 8× H100");
  EXPECT_EQ(check_allreduce_busbw(350, e).status, CheckStatus::Pass);
  const CheckRow slow = check_allreduce_busbw(200, e);
  EXPECT_EQ(slow.status, CheckStatus::Fail);
  EXPECT_EQ(slow.expected, "≥ 270 GB/s (75 % of 360, NVLink, 8× H100)");
  const Topology pcie = load_topology(cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/topology/pcie_only_2socket.json"));
  EXPECT_EQ(expected_allreduce_busbw(pcie, 4, "NVIDIA A100").gbs, 15);
  const Topology pairs = load_topology(cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/topology/pcie_nvlink_bridge_pairs.json"));
  EXPECT_EQ(expected_allreduce_busbw(pairs, 2, "NVIDIA A100 80GB PCIe").gbs, 230);  // GPUs 0-1: one bridge pair
  EXPECT_EQ(expected_allreduce_busbw(pairs, 4, "NVIDIA A100 80GB PCIe").gbs, 15);
}
