// ProgressBoard over an in-process HashStore: published values, who had not arrived, dump requests.
#include "comm/diagnostics/progress_board.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

using meshtrain::comm::ProgressBoard;

namespace {

constexpr auto kPeriod = std::chrono::milliseconds(20);

}  // namespace

TEST(ProgressBoard, NamesTheRanksThatHadNotArrived) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  // Three ranks of one group in one process: ranks 0 and 1 start collective 5, rank 2 is still at 4 done.
  ProgressBoard b0(store, "g", 0, 3, nullptr, kPeriod), b1(store, "g", 1, 3, nullptr, kPeriod),
      b2(store, "g", 2, 3, nullptr, kPeriod);
  for (std::uint64_t s = 0; s < 5; ++s) {
    for (ProgressBoard* b : {&b0, &b1, &b2}) {
      b->arrived(s);
      b->completed(s);
    }
  }
  b0.arrived(5);
  b1.arrived(5);
  // The peers' values out now: read_all waits only one of their periods, which a loaded machine may outlast.
  b1.flush();
  b2.flush();
  const auto all = b0.read_all();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(*all[0].arrived, 6u);
  EXPECT_EQ(*all[0].completed, 5u);
  EXPECT_EQ(*all[2].arrived, 5u);
  EXPECT_EQ(b0.not_arrived(5), "ranks that had not arrived: 2 (collectives 5 started/5 completed)");
  EXPECT_EQ(b0.not_arrived(4), "");
}

TEST(ProgressBoard, ARankWithoutAValueIsReported) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  ProgressBoard b0(store, "h", 0, 2, nullptr, kPeriod);  // rank 1 never made its board
  b0.arrived(0);
  EXPECT_EQ(b0.not_arrived(0), "ranks that had not arrived: 1 (collectives no report)");
}

TEST(ProgressBoard, DumpRequestsReachOtherBoardsOnceWithTheFirstReason) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::atomic<int> calls{0};
  std::string got;
  std::mutex mu;
  ProgressBoard listener(store, "x", 1, 2, [&](const std::string& r) {
    std::lock_guard<std::mutex> lock(mu);
    got = r;
    ++calls;
  }, kPeriod);
  ProgressBoard asker(store, "y", 0, 2, nullptr, kPeriod);
  asker.request_dumps("first failure");
  asker.request_dumps("second failure");
  // The listener checks the dump key about once a second; a loaded machine may take several: wait up to 30 s.
  for (int i = 0; i < 3000 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls.load(), 1);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(got, "first failure");
}
