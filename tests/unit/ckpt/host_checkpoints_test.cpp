// HostCheckpoints over real CPU communicators (ranks as threads): two "nodes" of two ranks, each node's memory a
// directory of its own. A restore takes the newest step every rank reaches, from the replicas where a node's memory
// is gone, and only snapshots of the same layout.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <mutex>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/host_checkpoints.h"
#include "meshtrain/core/fs.h"
#include "unit/ckpt/rank_threads.h"

using namespace meshtrain;
using meshtrain::ckpt_test::run_ranks;
namespace fs = std::filesystem;

namespace {

constexpr int kRanks = 4, kPerNode = 2;

struct Memory {
  std::string root = (fs::temp_directory_path() / ("host_ckpt_" + std::to_string(::getpid()))).string();
  Memory() { remove_tree(root); }
  ~Memory() { remove_tree(root); }
  std::string node(int rank) const { return root + "/node" + std::to_string(rank / kPerNode); }
};

comm::WorldInfo world_of(int rank) { return {rank, kRanks, rank % kPerNode, kPerNode}; }

// Rank r's block of a [4, 3] tensor (row r) at `step`: r * 100 + step in every element.
std::vector<ShardedTensor> blocks(int rank, int64_t step) {
  return {{"model.w", {kRanks, 3}, {rank, 0}, at::full({1, 3}, rank * 100.0 + static_cast<double>(step)), false}};
}

// Every rank saves steps 1..`last` (each waited for); `layout` names the layout that saved them. `keep_from(s)`:
// what the ranks agreed every rank held when step s's snapshot began (by default s − 1, the steady state).
void save_steps(const Memory& m, int64_t last, const std::string& layout,
                const std::function<int64_t(int64_t)>& keep_from = [](int64_t s) { return s - 1; }) {
  auto errors = run_ranks(kRanks, [&](int r, comm::CommPtr c) {
    ckpt::HostCheckpoints host(m.node(r), world_of(r), layout, c);
    for (int64_t s = 1; s <= last; ++s) {
      ckpt::SaveInfo info;
      info.mesh = {{"layout", layout}, {"world_size", kRanks}};
      host.save_async(s, blocks(r, s), info, keep_from(s));
    }
    host.wait();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

// Every rank's restore(at_least) under `layout`: (step or −1, ranks from replicas, the value rank r loads).
struct Outcome {
  int64_t step = -1;
  int from_replicas = -1;
  std::vector<double> values = std::vector<double>(kRanks, -1);
};
Outcome restore_all(const Memory& m, int64_t at_least, const std::string& layout) {
  Outcome out;
  std::mutex mu;
  auto errors = run_ranks(kRanks, [&](int r, comm::CommPtr c) {
    ckpt::HostCheckpoints host(m.node(r), world_of(r), layout, c);
    const auto got = host.restore(at_least);
    if (!got) return;
    auto wanted = blocks(r, 0);
    ckpt::load_into(got->dir, wanted);
    std::lock_guard<std::mutex> lock(mu);
    out.step = got->step;
    out.from_replicas = got->from_replicas;
    out.values[static_cast<size_t>(r)] = wanted[0].local[0][0].item<double>();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  return out;
}

TEST(HostCheckpoints, RestoresTheNewestStepFromEachRanksOwnCopy) {
  Memory m;
  save_steps(m, 3, "fsdp 4");
  const Outcome o = restore_all(m, 0, "fsdp 4");
  EXPECT_EQ(o.step, 3);
  EXPECT_EQ(o.from_replicas, 0);
  EXPECT_EQ(o.values, (std::vector<double>{3, 103, 203, 303}));
  // The newest two are kept, in each rank's own directory and in the replica it holds.
  EXPECT_FALSE(fs::exists(m.node(0) + "/rank_00000/step_00000001"));
  EXPECT_TRUE(fs::exists(m.node(0) + "/rank_00000/step_00000002"));
  EXPECT_TRUE(fs::exists(m.node(0) + "/replica_00002/step_00000003"));
  EXPECT_FALSE(fs::exists(m.node(0) + "/replica_00002/step_00000001"));
}

// A step some rank may still lack (its write was slow) is kept until every rank holds a newer one: a snapshot
// prunes only what is older than the agreed step, keeping 2 at least and 3 at most.
TEST(HostCheckpoints, KeepsTheStepEveryRankHoldsAndAtMostThree) {
  Memory m;
  save_steps(m, 3, "fsdp 4", [](int64_t) { return 1; });  // every rank held only step 1 when 2 and 3 began
  for (int64_t s : {1, 2, 3}) EXPECT_TRUE(fs::exists(m.node(0) + "/rank_00000/step_0000000" + std::to_string(s)));
  EXPECT_TRUE(fs::exists(m.node(2) + "/replica_00000/step_00000001"));
  Memory n;
  save_steps(n, 4, "fsdp 4", [](int64_t) { return -1; });  // nothing agreed (a rank's writes fail): the newest 3
  EXPECT_FALSE(fs::exists(n.node(0) + "/rank_00000/step_00000001"));
  for (int64_t s : {2, 3, 4}) EXPECT_TRUE(fs::exists(n.node(0) + "/rank_00000/step_0000000" + std::to_string(s)));
}

TEST(HostCheckpoints, ALostNodesRanksTakeTheReplicasTheOtherNodeHolds) {
  Memory m;
  save_steps(m, 3, "fsdp 4");
  remove_tree(m.node(2));  // node 1 (ranks 2, 3) lost with its memory
  const Outcome o = restore_all(m, 0, "fsdp 4");
  EXPECT_EQ(o.step, 3);
  EXPECT_EQ(o.from_replicas, 2);
  EXPECT_EQ(o.values, (std::vector<double>{3, 103, 203, 303}));
  EXPECT_TRUE(fs::exists(m.node(2) + "/rank_00002/step_00000003/meta.json"));  // fetched into its own place
}

TEST(HostCheckpoints, AStepSomeRankCannotReachIsNotChosen) {
  Memory m;
  save_steps(m, 3, "fsdp 4");
  // Rank 1's copy of step 3 gone, and the replica of it (held by rank 3) too: step 2 is the newest all reach.
  remove_tree(m.node(0) + "/rank_00001/step_00000003");
  remove_tree(m.node(2) + "/replica_00001/step_00000003");
  const Outcome o = restore_all(m, 0, "fsdp 4");
  EXPECT_EQ(o.step, 2);
  EXPECT_EQ(o.values, (std::vector<double>{2, 102, 202, 302}));
}

TEST(HostCheckpoints, NothingOlderThanAskedAndNothingOfAnotherLayout) {
  Memory m;
  save_steps(m, 3, "fsdp 4");
  EXPECT_EQ(restore_all(m, 4, "fsdp 4").step, -1);      // the disk holds step 4: memory is older
  EXPECT_EQ(restore_all(m, 0, "dp 2 × tp 2").step, -1);  // saved by another layout: its blocks are not this one's
}

}  // namespace
