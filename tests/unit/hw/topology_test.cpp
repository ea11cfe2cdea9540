// Topology: the fixtures load, their NVLink cliques are what the hardware has, JSON round-trips, CPU lists,
// malformed files are one-line UserErrors, and detection on this machine never throws.
#include <gtest/gtest.h>

#include <fstream>

#include "meshtrain/hw/cpu_list.h"
#include "meshtrain/hw/topology.h"
#include "meshtrain/hw/topology_detect.h"
#include "meshtrain/hw/topology_json.h"
#include "meshtrain/hw/topology_matrix.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::hw;
using meshtrain::testing_support::temp_dir;
using meshtrain::testing_support::user_error;

namespace {

std::string topology_fixture(const std::string& name) {
  return cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/topology/", name, ".json");
}

using Cliques = std::vector<std::vector<int>>;

}  // namespace

TEST(Topology, NvSwitchBoardsAreOneClique) {
  for (const char* name : {"dgx_a100", "hgx_h100"}) {
    Topology t = load_topology(topology_fixture(name));
    ASSERT_EQ(t.num_gpus(), 8) << name;
    EXPECT_EQ(t.nvlink_cliques(), (Cliques{{0, 1, 2, 3, 4, 5, 6, 7}})) << name;
    EXPECT_EQ(t.largest_clique(), 8);
  }
  Topology a100 = load_topology(topology_fixture("dgx_a100"));
  EXPECT_EQ(a100.nvlinks[0][7], 12);
  EXPECT_EQ(a100.gpus[2].numa_node, 1);
  EXPECT_EQ(a100.gpus[2].cpus.size(), 32u);
  EXPECT_EQ(a100.pcie[0][1], PcieLevel::PXB);
  EXPECT_EQ(a100.pcie[0][5], PcieLevel::SYS);
}

TEST(Topology, BridgePairsAndPcieOnly) {
  Topology b = load_topology(topology_fixture("pcie_nvlink_bridge_pairs"));
  EXPECT_EQ(b.nvlink_cliques(), (Cliques{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  Topology p = load_topology(topology_fixture("pcie_only_2socket"));
  EXPECT_EQ(p.nvlink_cliques(), (Cliques{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(p.largest_clique(), 1);
}

TEST(Topology, HybridCubeMeshHasOverlappingCliques) {
  Topology t = load_topology(topology_fixture("dgx1_v100_hybrid_cube_mesh"));
  EXPECT_EQ(t.nvlink_cliques(), (Cliques{{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(Topology, JsonRoundTripsAndMatrixPrints) {
  Topology t = load_topology(topology_fixture("pcie_nvlink_bridge_pairs"));
  auto dir = temp_dir("topology_roundtrip");
  save_topology(t, (dir / "t.json").string());
  Topology u = load_topology((dir / "t.json").string());
  EXPECT_EQ(u.nvlinks, t.nvlinks);
  EXPECT_EQ(u.pcie, t.pcie);
  EXPECT_EQ(u.system, t.system);
  ASSERT_EQ(u.gpus.size(), t.gpus.size());
  EXPECT_EQ(u.gpus[5].cpus, t.gpus[5].cpus);
  EXPECT_EQ(u.gpus[5].pci_bus_id, t.gpus[5].pci_bus_id);
  const std::string m = format_topology_matrix(t);
  EXPECT_NE(m.find("GPU0  X     NV4   NODE  NODE  SYS"), std::string::npos) << m;
  EXPECT_NE(m.find("0-31,64-95"), std::string::npos);
}

TEST(Topology, CpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_NE(user_error([] { parse_cpu_list("0-x"); }).find("'0-x' is not N or N-M"), std::string::npos);
  EXPECT_NE(user_error([] { parse_cpu_list("5-2"); }).find("is not N or N-M"), std::string::npos);
}

TEST(Topology, MalformedFilesAreUserErrors) {
  EXPECT_NE(user_error([] { topology_from_json("{", "t.json"); }).find("t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(user_error([] { topology_from_json("{\"gpus\": 3}", "t.json"); }).find("key 'gpus' must be"),
            std::string::npos);
  const std::string asym =
      R"({"gpus": [{"name": "a"}, {"name": "b"}], "nvlink": [[0, 1], [0, 0]], "pcie": [["X", "SYS"], ["SYS", "X"]]})";
  EXPECT_NE(user_error([&] { topology_from_json(asym, "t.json"); }).find("not linked symmetrically"),
            std::string::npos);
  const std::string level =
      R"({"gpus": [{"name": "a"}, {"name": "b"}], "nvlink": [[0, 0], [0, 0]], "pcie": [["X", "QPI"], ["QPI", "X"]]})";
  EXPECT_NE(user_error([&] { topology_from_json(level, "t.json"); }).find("pcie[0][1] must be one of"),
            std::string::npos);
  EXPECT_NE(user_error([] { load_topology("/nonexistent/t.json"); }).find("cannot be read"), std::string::npos);
}

// On this machine (GPUs or not) detection returns a consistent topology and says where it came from.
TEST(Topology, DetectionIsConsistent) {
  Topology t = detect_topology();
  EXPECT_FALSE(t.source.empty());
  EXPECT_NO_THROW(t.check());
  if (t.num_gpus() > 0) {
    EXPECT_FALSE(t.gpus[0].pci_bus_id.empty());
  }
}
