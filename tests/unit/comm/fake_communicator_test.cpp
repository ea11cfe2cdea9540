// Fake backend: "every rank holds this rank's data" semantics and the same argument checks as the CPU backend.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/core/error.h"

using namespace meshtrain;
using namespace meshtrain::comm;

TEST(FakeCommunicator, CollectivesAsIfEveryRankHeldThisData) {
  CommPtr c = make_fake_communicator(1, 4);
  EXPECT_EQ(c->backend_name(), "fake");
  at::Tensor x = at::arange(6, at::kFloat);
  c->all_reduce(x, ReduceOp::Sum)->wait();
  EXPECT_TRUE(at::equal(x, at::arange(6, at::kFloat) * 4));
  at::Tensor in = at::arange(3, at::kInt), out = at::zeros({12}, at::kInt);
  c->all_gather_into(out, in)->wait();
  EXPECT_TRUE(at::equal(out, in.repeat({4})));
  at::Tensor rs = at::zeros({3}, at::kInt);
  c->reduce_scatter_into(rs, out, ReduceOp::Sum)->wait();  // chunk 1 of out is `in`
  EXPECT_TRUE(at::equal(rs, in * 4));
  at::Tensor a2a = at::zeros({12}, at::kLong), src = at::arange(12, at::kLong);
  c->all_to_all(a2a, src)->wait();
  EXPECT_TRUE(at::equal(a2a, at::arange(3, 6, at::kLong).repeat({4})));
  c->barrier();
}

TEST(FakeCommunicator, ChecksArguments) {
  CommPtr c = make_fake_communicator(0, 2);
  at::Tensor d = at::ones({2}, at::kDouble);
  EXPECT_THROW(c->all_reduce(d, ReduceOp::Sum), UserError);
  at::Tensor f = at::ones({2});
  EXPECT_THROW(c->send(f, 0), UserError);
  EXPECT_THROW(c->broadcast(f, 2), UserError);
  EXPECT_THROW(c->split(0, 0), UserError);
  EXPECT_THROW(make_fake_communicator(2, 2), UserError);
}
