// assign_replica_writers: over real CPU communicators (ranks as threads), every block is written by exactly
// one of its holders whatever `write` said before, and replicated blocks are spread so the holders' bytes
// balance (the greedy's result is checked exactly where it is the optimum).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "meshtrain/ckpt/replica_writers.h"
#include "unit/ckpt/rank_threads.h"

using namespace meshtrain;
using meshtrain::ckpt_test::run_ranks;

namespace {

ShardedTensor block(const std::string& name, int64_t rows, int64_t offset, int64_t global_rows, bool write) {
  return {name, {global_rows}, {offset}, at::zeros({rows}), write};
}

// Runs `blocks_of(rank)` through the assignment on `n` ranks; returns (name@offset → writer ranks) and each
// rank's bytes.
std::pair<std::map<std::string, std::vector<int>>, std::vector<uint64_t>> assign(
    int n, const std::function<std::vector<ShardedTensor>(int)>& blocks_of) {
  std::mutex mu;
  std::map<std::string, std::vector<int>> writers;
  std::vector<uint64_t> bytes(static_cast<size_t>(n));
  auto errors = run_ranks(n, [&](int r, comm::CommPtr c) {
    auto blocks = blocks_of(r);
    const uint64_t mine = ckpt::assign_replica_writers(blocks, c.get());
    std::lock_guard<std::mutex> lock(mu);
    bytes[static_cast<size_t>(r)] = mine;
    for (const auto& b : blocks) {
      auto& w = writers[b.name + "@" + std::to_string(b.offsets[0])];
      if (b.write) w.push_back(r);
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  return {writers, bytes};
}

TEST(ReplicaWriters, DataParallelReplicasSpreadOverEveryRank) {
  // Four DDP replicas of five tensors (floats: 1000, 600, 400, 300, 200), every rank told it writes.
  const std::vector<std::pair<std::string, int64_t>> tensors = {{"a", 1000}, {"b", 600}, {"c", 400}, {"d", 300}, {"e", 200}};
  auto [writers, bytes] = assign(4, [&](int) {
    std::vector<ShardedTensor> out;
    for (const auto& [n, rows] : tensors) out.push_back(block(n, rows, 0, rows, true));
    return out;
  });
  for (const auto& [n, w] : writers) EXPECT_EQ(w.size(), 1u) << n;
  // Largest first to the least loaded: a | b | c | d + e — the largest tensor bounds any assignment.
  std::vector<uint64_t> sorted = bytes;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint64_t>{1600, 2000, 2400, 4000}));
}

TEST(ReplicaWriters, ShardedReplicasAndSoleHolders) {
  // HSDP 2 × 2: ranks {0, 1} hold rows [0, 4) of "w", ranks {2, 3} rows [4, 8); each rank also holds a block
  // only it has, flagged write = false (the assignment must still pick it).
  auto [writers, bytes] = assign(4, [&](int r) {
    return std::vector<ShardedTensor>{block("w", 4, r < 2 ? 0 : 4, 8, r % 2 == 0),
                                      block("own", 2, 2 * r, 8, false), block("w2", 4, r < 2 ? 0 : 4, 8, true)};
  });
  for (const auto& [n, w] : writers) EXPECT_EQ(w.size(), 1u) << n;
  EXPECT_EQ(writers.size(), 8u);  // w@0, w@4, w2@0, w2@4, own@0, own@2, own@4, own@6
  for (int r = 0; r < 4; ++r) EXPECT_EQ(writers["own@" + std::to_string(2 * r)], std::vector<int>{r});
  // Each replica pair splits its two blocks: every rank writes one 16-byte block besides its own 8 bytes.
  for (uint64_t b : bytes) EXPECT_EQ(b, 24u);
}

TEST(ReplicaWriters, SingleProcessWritesEverything) {
  std::vector<ShardedTensor> blocks = {block("a", 3, 0, 3, false), block("b", 0, 0, 0, false)};
  EXPECT_EQ(ckpt::assign_replica_writers(blocks, nullptr), 12u);
  EXPECT_TRUE(blocks[0].write && blocks[1].write);
}

}  // namespace
