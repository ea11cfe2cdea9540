// Placement on every fixture and several tp sizes: tp groups inside NVLink cliques, data-parallel across;
// one UserError naming tp and the largest clique when impossible; allow_slow_tp picks the nearest PCIe pairs.
#include <gtest/gtest.h>

#include <numeric>

#include "meshtrain/comm/placement.h"
#include "meshtrain/hw/topology_json.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::hw;
using meshtrain::testing_support::user_error;

namespace {

Topology fixture(const std::string& name) {
  return load_topology(cat(MESHTRAIN_SOURCE_DIR, "/tests/fixtures/topology/", name, ".json"));
}

MeshShape shape(int world, int tp, const std::string& order = "pp-dp-fsdp-tp") {
  ParallelConfig p;
  p.tp = tp;
  p.order = order;
  return MeshShape::from_config(p, world);
}

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Every group's GPUs are pairwise NVLinked and no GPU is used twice.
void expect_valid(const Topology& t, const Placement& p) {
  std::vector<int> gpus = p.gpu_of_local_rank;
  std::sort(gpus.begin(), gpus.end());
  EXPECT_EQ(std::adjacent_find(gpus.begin(), gpus.end()), gpus.end()) << "a GPU used twice";
  if (!p.groups_on_nvlink) return;
  for (const auto& g : p.groups) {
    for (int a : g) {
      for (int b : g) {
        if (a != b) {
          EXPECT_TRUE(t.nvlinked(p.gpu_of_local_rank[a], p.gpu_of_local_rank[b])) << a << "-" << b;
        }
      }
    }
  }
}

}  // namespace

TEST(Placement, NvSwitchBoardsKeepTheIdentityForEveryTp) {
  for (const char* name : {"dgx_a100", "hgx_h100"}) {
    Topology t = fixture(name);
    for (int tp : {1, 2, 4, 8}) {
      Placement p = place_tp(t, shape(8, tp), 8, 0, false);
      EXPECT_TRUE(p.groups_on_nvlink) << name << " tp " << tp;
      EXPECT_EQ(p.gpu_of_local_rank, identity(8)) << name << " tp " << tp;
      EXPECT_EQ(p.groups.size(), static_cast<std::size_t>(8 / tp));
      EXPECT_TRUE(p.note.empty());
    }
  }
}

TEST(Placement, BridgePairsHostTpTwoAndRefuseTpFour) {
  Topology t = fixture("pcie_nvlink_bridge_pairs");
  Placement p = place_tp(t, shape(8, 2), 8, 0, false);
  EXPECT_TRUE(p.groups_on_nvlink);
  EXPECT_EQ(p.gpu_of_local_rank, identity(8));
  EXPECT_EQ(p.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(place_tp(t, shape(8, 1), 8, 0, false).gpu_of_local_rank, identity(8));
  const std::string want = cat(
      "parallel.tp = 4: cannot place 2 group(s) of 4 GPUs each inside NVLink cliques on this node: the largest "
      "NVLink clique has 2 GPU(s) (cliques {0,1}; {2,3}; {4,5}; {6,7}; fixture ",
      MESHTRAIN_SOURCE_DIR,
      "/tests/fixtures/topology/pcie_nvlink_bridge_pairs.json); lower parallel.tp or set parallel.allow_slow_tp: "
      "true to run it over PCIe");
  EXPECT_EQ(user_error([&] { place_tp(t, shape(8, 4), 8, 0, false); }), want);
  // allow_slow_tp: each group of 4 = two bridged pairs on one socket (NODE), never across sockets.
  Placement slow = place_tp(t, shape(8, 4), 8, 0, true);
  EXPECT_FALSE(slow.groups_on_nvlink);
  EXPECT_EQ(slow.gpu_of_local_rank, identity(8));
  EXPECT_NE(slow.note.find("proceeding over PCIe"), std::string::npos);
}

// Bridges on 0-2 and 1-3 (a board wired that way): tp pairs of consecutive ranks must be moved onto them.
TEST(Placement, ReordersGpusWhenBridgesAreNotAdjacent) {
  Topology t = fixture("pcie_nvlink_bridge_pairs");
  std::vector<int> perm = {0, 2, 1, 3, 4, 6, 5, 7};  // new index i is old GPU perm[i]
  Topology u = t;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      u.nvlinks[i][j] = t.nvlinks[perm[i]][perm[j]];
      u.pcie[i][j] = t.pcie[perm[i]][perm[j]];
    }
  }
  Placement p = place_tp(u, shape(8, 2), 8, 0, false);
  EXPECT_TRUE(p.groups_on_nvlink);
  EXPECT_EQ(p.gpu_of_local_rank, (std::vector<int>{0, 2, 1, 3, 4, 6, 5, 7}));
  expect_valid(u, p);
  // tp outermost in the order: the tp pairs are ranks {0,4}, {1,5}, …, which must land on bridged GPUs.
  Placement q = place_tp(t, shape(8, 2, "tp-pp-dp-fsdp"), 8, 0, false);
  EXPECT_EQ(q.groups, (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(q.gpu_of_local_rank, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  expect_valid(t, q);
}

TEST(Placement, PcieOnlyAllowsTpOneAndPrefersNearPairsWhenSlow) {
  Topology t = fixture("pcie_only_2socket");
  EXPECT_EQ(place_tp(t, shape(8, 1), 8, 0, false).gpu_of_local_rank, identity(8));
  const std::string e = user_error([&] { place_tp(t, shape(8, 2), 8, 0, false); });
  EXPECT_NE(e.find("parallel.tp = 2: cannot place 4 group(s) of 2 GPUs"), std::string::npos) << e;
  EXPECT_NE(e.find("the largest NVLink clique has 1 GPU(s)"), std::string::npos) << e;
  // Slow: pairs under one PCIe switch (PXB) rather than across sockets.
  Placement slow = place_tp(t, shape(8, 2), 8, 0, true);
  EXPECT_EQ(slow.gpu_of_local_rank, identity(8));
  EXPECT_FALSE(slow.groups_on_nvlink);
}

TEST(Placement, HybridCubeMesh) {
  Topology t = fixture("dgx1_v100_hybrid_cube_mesh");
  for (int tp : {1, 2, 4}) {
    Placement p = place_tp(t, shape(8, tp), 8, 0, false);
    EXPECT_TRUE(p.groups_on_nvlink) << tp;
    EXPECT_EQ(p.gpu_of_local_rank, identity(8)) << tp;
    expect_valid(t, p);
  }
  EXPECT_NE(user_error([&] { place_tp(t, shape(8, 8), 8, 0, false); }).find("the largest NVLink clique has 4 GPU(s)"),
            std::string::npos);
}

TEST(Placement, FewerRanksThanGpusPickACliqueSubset) {
  // 4 ranks with tp 4 on the cube mesh: one clique of four.
  Topology t = fixture("dgx1_v100_hybrid_cube_mesh");
  Placement p = place_tp(t, shape(4, 4), 4, 0, false);
  EXPECT_EQ(p.gpu_of_local_rank, (std::vector<int>{0, 1, 2, 3}));
  // 2 ranks, tp 2, on a board bridged 0-2 / 1-3: GPUs 0 and 2.
  Topology b = fixture("pcie_nvlink_bridge_pairs");
  Topology u = b;
  std::vector<int> perm = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) u.nvlinks[i][j] = b.nvlinks[perm[i]][perm[j]], u.pcie[i][j] = b.pcie[perm[i]][perm[j]];
  EXPECT_EQ(place_tp(u, shape(2, 2), 2, 0, false).gpu_of_local_rank, (std::vector<int>{0, 2}));
}

TEST(Placement, MultiNodeGroupsAndErrors) {
  Topology t = fixture("dgx_a100");
  // 16 ranks on 2 nodes, tp 8: node 1 holds ranks 8..15, one whole tp group.
  Placement p = place_tp(t, shape(16, 8), 8, 1, false);
  EXPECT_EQ(p.groups, (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_TRUE(p.groups_on_nvlink);
  // tp 16 spans the nodes.
  EXPECT_NE(user_error([&] { place_tp(t, shape(16, 16), 8, 0, false); }).find("tensor-parallel groups span nodes"),
            std::string::npos);
  EXPECT_FALSE(place_tp(t, shape(16, 16), 8, 0, true).groups_on_nvlink);
  // More local ranks than GPUs.
  EXPECT_NE(user_error([&] { place_tp(t, shape(16, 2), 16, 0, false); }).find("16 local ranks but this node has 8 GPUs"),
            std::string::npos);
}

TEST(Placement, NoGpusKeepsTheIdentity) {
  Topology none;
  none.source = "no NVIDIA GPU found";
  Placement p = place_tp(none, shape(4, 2), 4, 0, false);
  EXPECT_EQ(p.gpu_of_local_rank, identity(4));
  EXPECT_FALSE(p.groups_on_nvlink);
  EXPECT_NE(p.note.find("no GPUs"), std::string::npos);
}
