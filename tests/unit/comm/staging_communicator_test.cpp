// StagingCommunicator over real CPU communicators (ranks as threads): what it reports it can take, ops passing
// through, split keeping the staging, a group of one moving nothing. Without a GPU here, the staged path is
// driven by non-contiguous CPU tensors, which the backend does not take either: they travel the same way
// (copied into a host buffer, the op, copied back into the caller's tensor at wait()).
#include "comm/staging/staging_communicator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/core/error.h"
#include "support/rank_threads.h"

using namespace meshtrain::comm;
using namespace std::chrono_literals;

namespace {

const c10::Device kGpu(c10::kCUDA, 0);

CommPtr staged(CommPtr inner) { return make_staging_communicator(std::move(inner), kGpu); }

// A [n, m] view that is not contiguous, holding `values` (shape [n, m]).
at::Tensor strided(const at::Tensor& values) { return values.t().contiguous().t(); }

void run_staged_ranks(int n, const std::string& group, const std::function<void(int, Communicator&)>& body) {
  CpuCommOptions opts;
  opts.timeout = 20s;
  const auto errors = meshtrain::testing_support::run_rank_threads(
      n, group, opts, [&](int r, CommPtr c) { body(r, *staged(std::move(c))); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

}  // namespace

TEST(StagingCommunicator, ReportsTheBackendsDeviceAndTakesTheCallers) {
  auto c = staged(make_cpu_communicator(nullptr, 0, 1, "solo", 5000ms));
  EXPECT_TRUE(c->device().is_cpu());
  EXPECT_TRUE(c->takes(c10::Device(c10::kCPU)));
  EXPECT_TRUE(c->takes(kGpu));
  EXPECT_FALSE(c->takes(c10::Device(c10::kCUDA, 1)));
  EXPECT_EQ(c->backend_name(), "cpu");
  EXPECT_EQ(c->size(), 1);
}

TEST(StagingCommunicator, ResultsReachTheCallersTensorAtWait) {
  run_staged_ranks(2, "stage_wait", [](int r, Communicator& c) {
    const at::Tensor mine = at::arange(12, at::kFloat).reshape({3, 4}) + 100 * r;
    at::Tensor t = strided(mine);
    ASSERT_FALSE(t.is_contiguous());
    WorkPtr w = c.all_reduce(t, ReduceOp::Sum);
    while (!w->is_completed()) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(at::equal(t, mine)) << "copied back before wait()";
    w->wait();
    const at::Tensor sum = 2 * at::arange(12, at::kFloat).reshape({3, 4}) + 100;
    EXPECT_TRUE(at::equal(t, sum));
    w->wait();  // idempotent: no second copy-back
    EXPECT_TRUE(at::equal(t, sum));
  });
}

TEST(StagingCommunicator, EveryOpPassesThrough) {
  run_staged_ranks(2, "stage_ops", [](int r, Communicator& c) {
    // all_gather: a strided `out`, a contiguous `in`.
    at::Tensor in = at::full({4}, r + 1, at::kInt);
    at::Tensor out = strided(at::zeros({4, 2}, at::kInt));
    c.all_gather_into(out, in)->wait();
    EXPECT_TRUE(at::equal(out.contiguous().view(-1), at::cat({at::full({4}, 1, at::kInt), at::full({4}, 2, at::kInt)})));
    // reduce_scatter: a strided `in`.
    at::Tensor rs_in = strided(at::arange(8, at::kFloat).reshape({4, 2}).t().contiguous().reshape({4, 2}));
    at::Tensor rs_out = at::zeros({4}, at::kFloat);
    c.reduce_scatter_into(rs_out, rs_in, ReduceOp::Avg)->wait();
    EXPECT_TRUE(at::equal(rs_out, rs_in.contiguous().view(-1).narrow(0, 4 * r, 4)));
    // broadcast from rank 1 into strided tensors: the root keeps its values, the other gets them.
    const at::Tensor root_values = at::arange(6, at::kLong).reshape({2, 3});
    at::Tensor b = strided(r == 1 ? root_values : at::zeros({2, 3}, at::kLong));
    c.broadcast(b, 1)->wait();
    EXPECT_TRUE(at::equal(b, root_values));
    // send / recv of strided tensors.
    at::Tensor p = strided(r == 0 ? root_values : at::zeros({2, 3}, at::kLong));
    if (r == 0) c.send(p, 1)->wait();
    else c.recv(p, 0)->wait();
    EXPECT_TRUE(at::equal(p, root_values));
    // all_to_all: chunk i of `out` is rank i's chunk `r`.
    at::Tensor a_in = strided((at::arange(4, at::kFloat) + 10 * r).reshape({2, 2}));
    at::Tensor a_out = strided(at::zeros({2, 2}, at::kFloat));
    c.all_to_all(a_out, a_in)->wait();
    const at::Tensor flat_in0 = strided(at::arange(4, at::kFloat).reshape({2, 2})).contiguous().view(-1);
    const at::Tensor flat_in1 = flat_in0 + 10;
    at::Tensor want = at::cat({flat_in0.narrow(0, 2 * r, 2), flat_in1.narrow(0, 2 * r, 2)});
    EXPECT_TRUE(at::equal(a_out.contiguous().view(-1), want));
    c.barrier();
  });
}

TEST(StagingCommunicator, SplitKeepsStaging) {
  run_staged_ranks(4, "stage_split", [](int r, Communicator& c) {
    auto sub = c.split(r % 2, r);
    ASSERT_TRUE(sub);
    EXPECT_TRUE(sub->takes(kGpu));
    EXPECT_EQ(sub->size(), 2);
    at::Tensor t = strided(at::full({2, 2}, static_cast<float>(r)));
    sub->all_reduce(t, ReduceOp::Max)->wait();
    EXPECT_TRUE(at::equal(t, at::full({2, 2}, static_cast<float>(r % 2 + 2))));
    EXPECT_EQ(c.split(-1, 0), nullptr);
  });
}

TEST(StagingCommunicator, AGroupOfOneMovesNothing) {
  auto c = staged(make_cpu_communicator(nullptr, 0, 1, "solo", 5000ms));
  const at::Tensor values = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor t = strided(values);
  c->all_reduce(t, ReduceOp::Sum)->wait();
  EXPECT_TRUE(at::equal(t, values));
  at::Tensor out = strided(at::zeros({2, 3}));
  c->all_gather_into(out, values)->wait();
  EXPECT_TRUE(at::equal(out, values));
  // A tensor the backend takes as it is passes straight through, argument checks included.
  at::Tensor d = at::ones({4}, at::kDouble);
  EXPECT_THROW(c->all_reduce(d, ReduceOp::Sum), meshtrain::UserError);
}
