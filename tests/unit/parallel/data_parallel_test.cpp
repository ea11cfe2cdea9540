// The reducer's bookkeeping in one process (a fake communicator of 2 ranks whose peers hold the same data, so
// the average is the local gradient): bucket order and sizes, gradients as views into the buckets, skipped
// reduction on accumulation steps, and the unused-parameter error.
#include "meshtrain/parallel/ddp/data_parallel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/comm/fake_communicator.h"
#include "support/test_support.h"

using namespace meshtrain;
using parallel::DataParallel;

namespace {

std::vector<DataParallel::Param> params(int n, int64_t numel) {
  std::vector<DataParallel::Param> out;
  for (int i = 0; i < n; ++i) out.push_back({"p" + std::to_string(i), at::randn({numel}).requires_grad_()});
  return out;
}

at::Tensor loss_of(const std::vector<DataParallel::Param>& ps, size_t skip = SIZE_MAX) {
  at::Tensor l = at::zeros({});
  for (size_t i = 0; i < ps.size(); ++i)
    if (i != skip) l = l + (ps[i].param * static_cast<double>(i + 1)).sum();
  return l;
}

}  // namespace

TEST(DataParallel, BucketsInReverseOrderWithASmallFirstBucket) {
  auto ps = params(6, 1024);  // 4 KiB each
  parallel::DataParallelOptions o{.bucket_mb = 12.0 / 1024, .first_bucket_mb = 4.0 / 1024};
  DataParallel dp(ps, comm::make_fake_communicator(0, 2), o);
  const auto names = dp.bucket_names();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], (std::vector<std::string>{"p5"}));
  EXPECT_EQ(names[1], (std::vector<std::string>{"p4", "p3", "p2"}));
  EXPECT_EQ(names[2], (std::vector<std::string>{"p1", "p0"}));
}

TEST(DataParallel, GradientsAreBucketViewsAndAccumulate) {
  auto ps = params(3, 10);
  DataParallel dp(ps, comm::make_fake_communicator(0, 2), {.bucket_mb = 1e-4, .first_bucket_mb = 1e-4});
  dp.set_requires_sync(false);
  loss_of(ps).backward();
  dp.finish_gradient_sync();
  dp.set_requires_sync(true);
  loss_of(ps).backward();
  dp.finish_gradient_sync();
  void* first = ps[0].param.grad().data_ptr();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(at::allclose(ps[i].param.grad(), at::full({10}, 2.0 * static_cast<double>(i + 1)))) << i;
    (void)first;
  }
  // Zeroing keeps the views: the next backward accumulates into the same memory.
  void* before = ps[1].param.grad().data_ptr();
  dp.zero_grad();
  loss_of(ps).backward();
  dp.finish_gradient_sync();
  EXPECT_EQ(ps[1].param.grad().data_ptr(), before);
  EXPECT_TRUE(at::allclose(ps[1].param.grad(), at::full({10}, 2.0)));
}

TEST(DataParallel, UnusedParameterIsAnErrorNamingIt) {
  auto ps = params(3, 10);
  DataParallel dp(ps, comm::make_fake_communicator(0, 2), {});
  loss_of(ps, /*skip=*/1).backward();
  EXPECT_NE(testing_support::user_error([&] { dp.finish_gradient_sync(); }).find("parameter 'p1' received no gradient"),
            std::string::npos);
}

TEST(DataParallel, UnusedParameterAllowedCountsAsZero) {
  auto ps = params(3, 10);
  DataParallel dp(ps, comm::make_fake_communicator(0, 2), {.allow_unused = true});
  loss_of(ps, /*skip=*/1).backward();
  dp.finish_gradient_sync();
  EXPECT_TRUE(at::equal(ps[1].param.grad(), at::zeros({10})));
  EXPECT_TRUE(at::allclose(ps[2].param.grad(), at::full({10}, 3.0)));
}

// Frozen parameters (requires_grad false, as TrainablePolicy marks them) are neither bucketed nor waited for:
// a synced backward without their gradients is no error, and they keep no .grad.
TEST(DataParallel, FrozenParametersAreNotBucketed) {
  auto ps = params(4, 10);
  ps[1].param.set_requires_grad(false);
  ps[2].param.set_requires_grad(false);
  DataParallel dp(ps, comm::make_fake_communicator(0, 2), {.bucket_mb = 1.0, .first_bucket_mb = 1.0});
  std::vector<std::string> bucketed;
  for (const auto& b : dp.bucket_names()) bucketed.insert(bucketed.end(), b.begin(), b.end());
  EXPECT_EQ(bucketed, (std::vector<std::string>{"p3", "p0"}));
  loss_of(ps).backward();
  dp.finish_gradient_sync();
  EXPECT_TRUE(at::allclose(ps[0].param.grad(), at::full({10}, 1.0)));
  EXPECT_TRUE(at::allclose(ps[3].param.grad(), at::full({10}, 4.0)));
  EXPECT_FALSE(ps[1].param.grad().defined());
  EXPECT_FALSE(ps[2].param.grad().defined());
}
