// The region functions' forward and backward. The fake backend (comm/fake_communicator.h) plays rank 1 of 2
// whose peer holds the same data: all-reduce doubles, all-gather repeats, reduce-scatter takes this rank's
// chunk doubled — so each result is known in closed form. A group of one makes every transition the identity.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/parallel/tp/tp_regions.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

using RegionFn = at::Tensor (*)(const at::Tensor&, const comm::CommPtr&);

struct Result {
  at::Tensor y, dx;
};

// y = f(x); backward of sum(y · g) with a fixed pattern g, so dx = f's transpose applied to g.
Result run(RegionFn f, const at::Tensor& x0, const comm::CommPtr& c, at::Tensor* g_out = nullptr) {
  auto x = x0.clone().requires_grad_(true);
  auto y = f(x, c);
  auto g = at::arange(y.numel(), at::kFloat).reshape(y.sizes()).add_(1);
  (y * g).sum().backward();
  if (g_out) *g_out = g;
  return {y.detach(), x.grad()};
}

at::Tensor input(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return at::arange(n, at::kFloat).reshape(shape).mul_(0.5).sub_(3);
}

const comm::CommPtr kPair = comm::make_fake_communicator(1, 2);

}  // namespace

TEST(TpRegions, CopyToIsIdentityForwardAllReduceBackward) {
  auto x = input({2, 3, 4});
  at::Tensor g;
  auto r = run(copy_to_tp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, x));
  EXPECT_TRUE(at::equal(r.dx, g * 2));
}

TEST(TpRegions, ReduceFromIsAllReduceForwardIdentityBackward) {
  auto x = input({2, 3, 4});
  at::Tensor g;
  auto r = run(reduce_from_tp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, x * 2));
  EXPECT_TRUE(at::equal(r.dx, g));
}

TEST(TpRegions, ScatterToKeepsThisRanksLastDimChunkAndGathersBack) {
  auto x = input({2, 3, 4});
  at::Tensor g;
  auto r = run(scatter_to_tp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, x.narrow(2, 2, 2)));  // rank 1's half
  EXPECT_TRUE(at::equal(r.dx, at::cat({g, g}, 2)));
}

TEST(TpRegions, GatherFromConcatenatesLastDimAndSplitsBack) {
  auto x = input({2, 3, 2});
  at::Tensor g;
  auto r = run(gather_from_tp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, at::cat({x, x}, 2)));
  EXPECT_TRUE(at::equal(r.dx, g.narrow(2, 2, 2)));
}

TEST(TpRegions, ScatterToSpSplitsTheSequenceDim) {
  auto x = input({2, 4, 3});
  at::Tensor g;
  auto r = run(scatter_to_sp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, x.narrow(1, 2, 2)));
  EXPECT_TRUE(at::equal(r.dx, at::cat({g, g}, 1)));
}

TEST(TpRegions, ReduceScatterToSpSumsAndKeepsThisRanksTokens) {
  auto x = input({2, 4, 3});
  at::Tensor g;
  auto r = run(reduce_scatter_to_sp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, x.narrow(1, 2, 2) * 2));
  EXPECT_TRUE(at::equal(r.dx, at::cat({g, g}, 1)));
}

TEST(TpRegions, GatherFromSpGathersTokensAndReduceScattersBack) {
  auto x = input({2, 2, 3});
  at::Tensor g;
  auto r = run(gather_from_sp_region, x, kPair, &g);
  EXPECT_TRUE(at::equal(r.y, at::cat({x, x}, 1)));
  EXPECT_TRUE(at::equal(r.dx, g.narrow(1, 2, 2) * 2));
}

TEST(TpRegions, OneRankGroupIsIdentityBothWays) {
  auto one = comm::make_fake_communicator(0, 1);
  auto x = input({2, 4, 3});
  for (RegionFn f : {copy_to_tp_region, reduce_from_tp_region, scatter_to_tp_region, gather_from_tp_region,
                     scatter_to_sp_region, reduce_scatter_to_sp_region, gather_from_sp_region}) {
    at::Tensor g;
    auto r = run(f, x, one, &g);
    EXPECT_TRUE(at::equal(r.y, x));
    EXPECT_TRUE(at::equal(r.dx, g));
  }
}

TEST(TpRegions, UnevenSequenceIsAUserErrorWithTheArithmetic) {
  auto x = input({2, 5, 4});
  auto msg = testing_support::user_error([&] { scatter_to_sp_region(x, kPair); });
  EXPECT_NE(msg.find("size 5 of dim 1 (sequence) is not divisible by the tensor-parallel size 2 (5 % 2 = 1)"),
            std::string::npos)
      << msg;
}
