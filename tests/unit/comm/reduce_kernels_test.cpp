// Reduce kernels: dtype conversions (bf16/fp16 through fp32), accumulation order, NaN, integer Avg.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "comm/reduce_kernels.h"
#include "meshtrain/core/error.h"

using namespace meshtrain;
using namespace meshtrain::comm;

TEST(ReduceKernels, SupportedDtypes) {
  for (auto t : {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) EXPECT_TRUE(is_supported_dtype(t));
  EXPECT_FALSE(is_supported_dtype(at::kDouble));
  EXPECT_THROW(check_supported_dtype(at::kDouble, "x"), UserError);
  EXPECT_EQ(dtype_size(at::kBFloat16), 2u);
}

TEST(ReduceKernels, ReduceIntoMatchesTorchForEveryDtypeAndOp) {
  for (auto t : {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
    at::Tensor a = at::randint(-50, 50, {1001}, at::kLong).to(t);
    at::Tensor b = at::randint(-50, 50, {1001}, at::kLong).to(t);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      at::Tensor d = a.clone();
      reduce_into(d.data_ptr(), b.data_ptr(), 1001, t, op);
      at::Tensor want = op == ReduceOp::Sum ? a + b : op == ReduceOp::Max ? at::maximum(a, b) : at::minimum(a, b);
      EXPECT_TRUE(at::equal(d, want)) << c10::toString(t) << " op " << reduce_op_name(op);
    }
  }
}

TEST(ReduceKernels, HalfSumRoundsOncePerCall) {
  // bf16: 256 + 1 is not representable; round to nearest even gives 256.
  at::Tensor d = at::full({3}, 256.0, at::kBFloat16);
  at::Tensor s = at::full({3}, 1.0, at::kBFloat16);
  reduce_into(d.data_ptr(), s.data_ptr(), 3, at::kBFloat16, ReduceOp::Sum);
  EXPECT_EQ(d[0].item<float>(), 256.0f);
  // bf16 0.1 + 0.2 computed in fp32 then rounded equals torch's bf16 add.
  at::Tensor x = at::full({1}, 0.1, at::kBFloat16), y = at::full({1}, 0.2, at::kBFloat16);
  at::Tensor want = x + y;
  reduce_into(x.data_ptr(), y.data_ptr(), 1, at::kBFloat16, ReduceOp::Sum);
  EXPECT_TRUE(at::equal(x, want));
}

TEST(ReduceKernels, ReduceManyAccumulatesHalfInFp32) {
  // fp16: 2048 + 1 + 1 step by step stays 2048 (2049 rounds to even); accumulated in fp32 it is 2050.
  at::Tensor a = at::full({5}, 2048.0, at::kHalf), b = at::ones({5}, at::kHalf), c = at::ones({5}, at::kHalf);
  const void* srcs[3] = {a.data_ptr(), b.data_ptr(), c.data_ptr()};
  at::Tensor out = at::empty({5}, at::kHalf);
  reduce_many(out.data_ptr(), srcs, 3, 5, at::kHalf, ReduceOp::Sum);
  EXPECT_EQ(out[4].item<float>(), 2050.0f);
  // Avg divides the fp32 accumulator: (2048 + 1 + 1) / 3 rounded once.
  reduce_many(out.data_ptr(), srcs, 3, 5, at::kHalf, ReduceOp::Avg);
  EXPECT_EQ(out[0].item<float>(), static_cast<float>(c10::Half(2050.0f / 3.0f)));
}

TEST(ReduceKernels, ReduceManyMayAliasItsFirstSource) {
  at::Tensor a = at::arange(5000, at::kFloat), b = at::arange(5000, at::kFloat);
  const void* srcs[2] = {a.data_ptr(), b.data_ptr()};
  reduce_many(a.data_ptr(), srcs, 2, 5000, at::kFloat, ReduceOp::Sum);
  EXPECT_TRUE(at::equal(a, at::arange(5000, at::kFloat) * 2));
}

TEST(ReduceKernels, NanPropagatesThroughMaxAndMin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    at::Tensor d = at::tensor({nan, 1.0f, 2.0f});
    at::Tensor s = at::tensor({3.0f, nan, 0.0f});
    reduce_into(d.data_ptr(), s.data_ptr(), 3, at::kFloat, op);
    EXPECT_TRUE(std::isnan(d[0].item<float>()));
    EXPECT_TRUE(std::isnan(d[1].item<float>()));
    EXPECT_EQ(d[2].item<float>(), op == ReduceOp::Max ? 2.0f : 0.0f);
  }
}

TEST(ReduceKernels, IntegerAvgTruncatesTowardZero) {
  at::Tensor d = at::tensor({7, -7, 6}, at::kInt);
  divide_by(d.data_ptr(), 3, at::kInt, 2);
  EXPECT_TRUE(at::equal(d, at::tensor({3, -3, 3}, at::kInt)));
  at::Tensor l = at::tensor({int64_t{1} << 40}, at::kLong);
  divide_by(l.data_ptr(), 1, at::kLong, 4);
  EXPECT_EQ(l[0].item<int64_t>(), int64_t{1} << 38);
}

TEST(ReduceKernels, FloatAvgDividesExactly) {
  // x / 3 and x * (1/3) differ in the last bit for some x: the division must be the exact one.
  at::Tensor d = at::arange(1, 1000, at::kFloat);
  at::Tensor want = d / 3;
  divide_by(d.data_ptr(), 999, at::kFloat, 3);
  EXPECT_TRUE(at::equal(d, want));
}

TEST(ReduceKernels, ZeroElementsIsANoOp) {
  reduce_into(nullptr, nullptr, 0, at::kFloat, ReduceOp::Sum);
  divide_by(nullptr, 0, at::kHalf, 3);
  reduce_many(nullptr, nullptr, 1, 0, at::kLong, ReduceOp::Max);
}
