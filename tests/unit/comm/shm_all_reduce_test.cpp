// The shared-memory all-reduce (same-host communicators), ranks as threads: several segments, sizes that do
// not divide evenly, every dtype and op, consecutive ops of different lengths (slot rotation across ops), and
// bitwise agreement with the result of the ring for exact (integer-valued) sums.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <functional>

#include "comm/cpu/shm_all_reduce.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/core/error.h"
#include "support/rank_threads.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace std::chrono_literals;

namespace {

void run_shm_ranks(int n, const std::string& group, const std::function<void(int, Communicator&)>& body, bool shm) {
  CpuCommOptions opts;
  opts.timeout = 60s;
  opts.same_host_shm = shm;
  const auto errors = testing_support::run_rank_threads(n, group, opts, [&](int r, CommPtr c) { body(r, *c); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// Segment boundaries: just under, at and over one segment, several segments plus a ragged tail.
const int64_t kSeg = static_cast<int64_t>(ShmArena::kDefaultSegmentBytes / 4);
const std::vector<int64_t> kSizes = {20000, kSeg - 1, kSeg, kSeg + 7, 3 * kSeg + 12345, 100003};

}  // namespace

class ShmAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(ShmAllReduce, SumsMaxAvgAcrossSegments) {
  const int n = GetParam();
  run_shm_ranks(n, "t_shm", [n](int r, Communicator& c) {
    for (int64_t numel : kSizes) {
      at::Tensor b = at::arange(numel, at::kLong).remainder(13).add_(1);
      at::Tensor x = (b * (r + 1)).to(at::kFloat);
      c.all_reduce(x, ReduceOp::Sum)->wait();
      MT_CHECK(at::equal(x, (b * (n * (n + 1) / 2)).to(at::kFloat)), "sum n=", numel);
      x = (b * (r + 1)).to(at::kInt);
      c.all_reduce(x, ReduceOp::Max)->wait();
      MT_CHECK(at::equal(x, (b * n).to(at::kInt)), "max n=", numel);
      x = (b * (r + 1)).to(at::kBFloat16);
      c.all_reduce(x, ReduceOp::Min)->wait();
      MT_CHECK(at::equal(x, b.to(at::kBFloat16)), "min n=", numel);
      x = (b * n * (r + 1)).to(at::kLong);  // avg = b·(n+1)/2·... kept exact: Σ(r+1)·n·b / n = b·n(n+1)/2
      c.all_reduce(x, ReduceOp::Avg)->wait();
      MT_CHECK(at::equal(x, b * (n * (n + 1) / 2)), "avg n=", numel);
    }
  }, /*shm=*/true);
}

// bf16/fp16 sums accumulate in fp32 and round once: 0.1·(r+1) summed over ranks, compared to the fp32 sum
// rounded once; every rank ends with the same bits.
TEST_P(ShmAllReduce, HalfTypesRoundOnceAndAgreeEverywhere) {
  const int n = GetParam();
  std::vector<at::Tensor> results(static_cast<std::size_t>(n));
  run_shm_ranks(n, "t_shm_half", [&](int r, Communicator& c) {
    for (auto t : {at::kBFloat16, at::kHalf}) {
      at::Tensor base = at::linspace(-3, 3, kSeg + 99, at::kFloat);
      at::Tensor x = (base * 0.1 * (r + 1)).to(t);
      c.all_reduce(x, ReduceOp::Sum)->wait();
      at::Tensor want = at::zeros_like(base);
      for (int p = 0; p < n; ++p) want += (base * 0.1 * (p + 1)).to(t).to(at::kFloat);
      MT_CHECK(at::equal(x, want.to(t)), c10::toString(t), ": not the fp32 sum rounded once");
      if (t == at::kHalf) results[static_cast<std::size_t>(r)] = x;
    }
  }, /*shm=*/true);
  for (int r = 1; r < n; ++r) EXPECT_TRUE(at::equal(results[0], results[static_cast<std::size_t>(r)]));
}

// Exact integer sums: shared memory and ring give the same bits.
TEST_P(ShmAllReduce, MatchesTheRing) {
  const int n = GetParam();
  std::vector<at::Tensor> by_path[2];
  for (bool shm : {false, true}) {
    auto& out = by_path[shm ? 1 : 0];
    out.resize(static_cast<std::size_t>(n));
    run_shm_ranks(n, shm ? "t_cmp_shm" : "t_cmp_ring", [&](int r, Communicator& c) {
      at::Tensor x = at::arange(2 * kSeg + 5, at::kLong).remainder(1000).mul_(r + 1).to(at::kFloat);
      c.all_reduce(x, ReduceOp::Sum)->wait();
      out[static_cast<std::size_t>(r)] = x;
    }, shm);
  }
  for (int r = 0; r < n; ++r) EXPECT_TRUE(at::equal(by_path[0][static_cast<std::size_t>(r)], by_path[1][static_cast<std::size_t>(r)]));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmAllReduce, ::testing::Values(2, 3, 4));
