// The FP8 cast kernels (model/kernels/fp8_cast.h) against the composite ATen ops they replace, on the GPU: the maxima
// (of the tensor, of each row, of each column) equal abs().amax() exactly; the FP8 bytes and inverse scales
// equal the composite's byte for byte (the kernels compute each scale and each rounding as ATen does), for
// fp32 and bf16 inputs, e4m3 and e5m2, tensorwise and rowwise, row-major, transposed and both copies; sizes
// that fill no tile (rows not multiples of 16, columns not of 8: the scalar path), a misaligned pointer,
// zeros, and magnitudes from 1e-30 to 1e30, where the largest element lands on the format's largest
// (saturating when the scale's rounding pushes it past) and small ones underflow. Independently of the
// composite, each copy dequantizes to the input within the format's rounding. Delayed scaling: over 40 casts at one
// site (the window wrapping twice; growing, shrinking, NaN and infinite tensors) the kernel's copies, scales and
// device state equal the composite's, and a cast captured in a CUDA graph, replayed on new values, follows the
// history as the eager casts do.
// Exit code 77 (skipped) without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <cmath>

#include <cstdio>
#include <string>

#include "meshtrain/model/kernels/fp8_cast.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);
constexpr at::ScalarType kE4M3 = at::kFloat8_e4m3fn, kE5M2 = at::kFloat8_e5m2;

struct Shape {
  int64_t rows, cols;
};
// Full tiles, partial ones, one element, columns that are not multiples of 8, rows not of 16, a wide row.
const Shape kShapes[] = {{64, 256}, {1, 1}, {7, 13}, {33, 300}, {100, 520}, {257, 72}, {48, 4104}};

enum class Values { normal, zeros, huge, spread };

// t [rows, cols] of `dt`; `misaligned`: contiguous, but one element past an allocation's start (the kernels'
// scalar path).
at::Tensor input(Shape s, at::ScalarType dt, Values v, bool misaligned = false) {
  auto t = at::randn({s.rows, s.cols}, kCuda) * 3;
  if (v == Values::zeros) t.zero_();
  if (v == Values::huge) {  // 1e30 throughout, row 1 1e4 times larger, every third row zero
    t.mul_(1e30);
    t.slice(0, 1, 2).mul_(1e4);
    t.slice(0, 0, s.rows, 3).zero_();
  }
  if (v == Values::spread)  // row i scaled by 10^(i mod 61 − 30): tiny rows underflow tensorwise
    t.mul_(at::pow(10.0, at::arange(s.rows, kCuda.dtype(at::kFloat)).remainder(61).sub(30)).unsqueeze(1));
  t = t.to(dt);
  if (!misaligned) return t;
  auto buf = at::empty({t.numel() + 1}, t.options());
  auto out = buf.narrow(0, 1, t.numel()).view({s.rows, s.cols});
  out.copy_(t);
  return out;
}

std::string what(Shape s, at::ScalarType dt, int v, Fp8Scaling sc = Fp8Scaling::off, at::ScalarType fmt = kE4M3) {
  return std::to_string(s.rows) + "x" + std::to_string(s.cols) + " " + c10::toString(dt) + " values " +
         std::to_string(v) + " " + c10::str(sc) + " " + c10::toString(fmt);
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a.view(at::kByte), b.view(at::kByte));
}

// |q · inv − t| ≤ half a unit in the last place of the format (2⁻⁴ relative for e4m3, 2⁻³ for e5m2) or half
// its smallest subnormal (2⁻¹⁰, 2⁻¹⁷) times inv, whichever is larger: the format's rounding, nothing else.
::testing::AssertionResult dequantizes(const at::Tensor& q, const at::Tensor& inv, const at::Tensor& t,
                                       at::ScalarType fmt) {
  const double rel = fmt == kE4M3 ? 0x1p-4 : 0x1p-3, sub = fmt == kE4M3 ? 0x1p-10 : 0x1p-17;
  const auto tf = t.to(at::kFloat).to(at::kDouble), inv_d = inv.to(at::kDouble);
  const auto err = (q.to(at::kFloat).to(at::kDouble) * inv_d - tf).abs();
  // 2⁻⁴ more for a bf16 input, whose scaled value the composite rounds to bf16 before the cast.
  const auto bound = at::maximum(tf.abs() * rel, inv_d.expand_as(tf) * sub) * (1 + 0x1p-4);
  const auto excess = (err - bound).max().item<double>();
  if (excess <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "dequantized error exceeds the format's rounding by " << excess;
}

}  // namespace

TEST(Fp8CastGpu, AmaxEqualsAbsAmaxOfTensorRowsAndColumns) {
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (Shape s : kShapes)
      for (int v = 0; v < 4; ++v)
        for (bool misaligned : {false, true}) {
          at::manual_seed(v);
          const auto t = input(s, dt, static_cast<Values>(v), misaligned);
          const auto a = model::fp8_amax(t, true, true, true);
          const auto abs = t.abs().to(at::kFloat);
          EXPECT_TRUE(at::equal(a.tensor, abs.max())) << what(s, dt, v) << (misaligned ? " misaligned" : "");
          EXPECT_TRUE(at::equal(a.rows, abs.amax({1}))) << what(s, dt, v) << (misaligned ? " misaligned" : "");
          EXPECT_TRUE(at::equal(a.cols, abs.amax({0}))) << what(s, dt, v) << (misaligned ? " misaligned" : "");
        }
}

TEST(Fp8CastGpu, AmaxAsksOnlyForWhatIsWantedAndPropagatesNaN) {
  auto t = at::randn({40, 24}, kCuda);
  const auto a = model::fp8_amax(t, false, true, false);
  EXPECT_FALSE(a.tensor.defined());
  EXPECT_FALSE(a.cols.defined());
  ASSERT_TRUE(a.rows.defined());
  t[5][7] = std::nan("");
  const auto b = model::fp8_amax(t, true, true, true);
  EXPECT_TRUE(b.tensor.isnan().item<bool>());
  EXPECT_TRUE(b.rows[5].isnan().item<bool>());
  EXPECT_EQ(b.rows.isnan().sum().item<int64_t>(), 1);
  EXPECT_TRUE(b.cols[7].isnan().item<bool>());
  EXPECT_EQ(b.cols.isnan().sum().item<int64_t>(), 1);
}

TEST(Fp8CastGpu, BothCopiesEqualTheCompositeByteForByte) {
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (Fp8Scaling sc : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise})
      for (auto fmt : {kE4M3, kE5M2})
        for (Shape s : kShapes)
          for (int v = 0; v < 4; ++v) {
            at::manual_seed(10 + v);
            const bool misaligned = s.rows == 33 || (s.rows == 64 && v % 2 == 1);  // scalar paths
            const auto t = input(s, dt, static_cast<Values>(v), misaligned);
            const auto got = model::fp8_cast(t, sc, fmt, model::Fp8Copies::both);
            const auto want = model::fp8_cast_composite(t, sc, fmt, model::Fp8Copies::both);
            const auto w = what(s, dt, v, sc, fmt);
            ASSERT_EQ(got.q.scalar_type(), fmt) << w;
            EXPECT_TRUE(same_bytes(got.q, want.q)) << w;
            EXPECT_TRUE(same_bytes(got.qt, want.qt)) << w;
            EXPECT_TRUE(at::equal(got.inv_scale, want.inv_scale)) << w;
            EXPECT_TRUE(at::equal(got.inv_scale_t, want.inv_scale_t)) << w;
            EXPECT_TRUE(dequantizes(got.q, got.inv_scale, t, fmt)) << w;
            EXPECT_TRUE(dequantizes(got.qt, got.inv_scale_t, t.t(), fmt)) << w;
            // The largest element lands on the format's largest, unless the scale's floor (amax taken as at
            // least 1e-12) keeps a tensor of tiny values (the spread rows 10⁻³⁰…) from being scaled up to it.
            if (t.abs().max().item<double>() >= 1e-12) {
              const double fmax = fmt == kE4M3 ? 448 : 57344;
              EXPECT_EQ(got.q.to(at::kFloat).abs().max().item<double>(), fmax) << w;
            }
          }
}

// The row-scaled row-major copy alone is one kernel of its own (fp8_cast_rows: a block per row); its bytes and
// scales are the composite's all the same, over every shape, dtype, format and kind of values above.
TEST(Fp8CastGpu, RowScaledRowMajorAloneEqualsTheCompositeByteForByte) {
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (auto fmt : {kE4M3, kE5M2})
      for (Shape s : kShapes)
        for (int v = 0; v < 4; ++v) {
          at::manual_seed(20 + v);
          const bool misaligned = s.rows == 33 || (s.rows == 64 && v % 2 == 1);
          const auto t = input(s, dt, static_cast<Values>(v), misaligned);
          const auto got = model::fp8_cast(t, Fp8Scaling::rowwise, fmt, model::Fp8Copies::rowmajor);
          const auto want = model::fp8_cast_composite(t, Fp8Scaling::rowwise, fmt, model::Fp8Copies::rowmajor);
          const auto w = what(s, dt, v, Fp8Scaling::rowwise, fmt);
          EXPECT_FALSE(got.qt.defined()) << w;
          EXPECT_TRUE(same_bytes(got.q, want.q)) << w;
          EXPECT_TRUE(at::equal(got.inv_scale, want.inv_scale)) << w;
          EXPECT_TRUE(dequantizes(got.q, got.inv_scale, t, fmt)) << w;
        }
}

TEST(Fp8CastGpu, EachCopyAloneEqualsTheComposite) {
  at::manual_seed(3);
  const auto t = input({96, 200}, at::kBFloat16, Values::normal);
  for (Fp8Scaling sc : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    const auto rm = model::fp8_cast(t, sc, kE4M3, model::Fp8Copies::rowmajor);
    const auto tr = model::fp8_cast(t, sc, kE4M3, model::Fp8Copies::transposed);
    const auto want = model::fp8_cast_composite(t, sc, kE4M3, model::Fp8Copies::both);
    EXPECT_FALSE(rm.qt.defined());
    EXPECT_FALSE(tr.q.defined());
    EXPECT_TRUE(same_bytes(rm.q, want.q));
    EXPECT_TRUE(at::equal(rm.inv_scale, want.inv_scale));
    EXPECT_TRUE(same_bytes(tr.qt, want.qt));
    EXPECT_TRUE(at::equal(tr.inv_scale_t, want.inv_scale_t));
    // Rowwise, one scale per row of each copy ([C, 1] for the transpose); tensorwise one for both.
    if (sc == Fp8Scaling::rowwise) {
      EXPECT_EQ(rm.inv_scale.sizes(), at::IntArrayRef({96, 1}));
      EXPECT_EQ(tr.inv_scale_t.sizes(), at::IntArrayRef({200, 1}));
    } else {
      EXPECT_EQ(rm.inv_scale.dim(), 0);
      EXPECT_TRUE(at::equal(rm.inv_scale, tr.inv_scale_t));
    }
  }
}

// Cast i of a delayed site's sequence: t's values times a factor that grows, shrinks and jumps, with a NaN at
// cast 7 and an infinity at cast 8 (recorded, never scaling later casts).
at::Tensor delayed_input(const at::Tensor& t, int i) {
  static const double kFactors[] = {1, 2, 0.5, 8, 1e-3, 1, 30, 1, 1, 0.25};
  auto u = t * kFactors[i % 10];
  if (i == 7) u[0][0] = std::nan("");
  if (i == 8) u[0][0] = INFINITY;
  return u.to(t.scalar_type());
}

TEST(Fp8CastGpu, DelayedCastsEqualTheCompositeOverAWrappingWindow) {
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (auto fmt : {kE4M3, kE5M2})
      for (Shape s : {Shape{64, 256}, Shape{7, 13}, Shape{257, 72}, Shape{100, 520}})
        for (auto copies : {model::Fp8Copies::both, model::Fp8Copies::rowmajor, model::Fp8Copies::transposed}) {
          at::manual_seed(30);
          const auto t = input(s, dt, Values::normal);  // 7 × 13 and 257 × 72: the scalar path
          auto kernel_state = at::zeros({model::fp8_delayed_state_size()}, kCuda.dtype(at::kInt));
          auto composite_state = kernel_state.clone();
          for (int i = 0; i < 40; ++i) {
            const auto u = delayed_input(t, i);
            const auto got = model::fp8_cast_delayed(u, fmt, copies, kernel_state, i == 0);
            const auto want = model::fp8_cast_delayed_composite(u, fmt, copies, composite_state, i == 0);
            const auto w = what(s, dt, i, Fp8Scaling::delayed, fmt) + " copies " + std::to_string(int(copies));
            if (copies != model::Fp8Copies::transposed) {
              ASSERT_TRUE(same_bytes(got.q, want.q)) << w;
              ASSERT_TRUE(at::equal(got.inv_scale, want.inv_scale)) << w;
            }
            if (copies != model::Fp8Copies::rowmajor) {
              ASSERT_TRUE(same_bytes(got.qt, want.qt)) << w;
              ASSERT_TRUE(at::equal(got.inv_scale_t, want.inv_scale_t)) << w;
            }
            ASSERT_TRUE(at::equal(kernel_state, composite_state)) << w << ": state " << kernel_state << " against "
                                                                  << composite_state;
          }
        }
}

// The state lives on the device: one cast captured in a CUDA graph, replayed on new values 20 times, gives the
// eager composite's copies and state at every replay.
TEST(Fp8CastGpu, DelayedCastReplayedInAGraphFollowsTheHistory) {
  at::manual_seed(31);
  const auto t = input({128, 192}, at::kBFloat16, Values::normal);
  auto x = t.clone();
  auto state = at::zeros({model::fp8_delayed_state_size()}, kCuda.dtype(at::kInt));
  auto composite_state = state.clone();
  // The site's first cast (two kernels) runs eagerly, as a training step's warm-up does.
  (void)model::fp8_cast_delayed(x, kE5M2, model::Fp8Copies::both, state, true);
  (void)model::fp8_cast_delayed_composite(x, kE5M2, model::Fp8Copies::both, composite_state, true);
  c10::cuda::getCurrentCUDAStream().synchronize();
  auto stream = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  model::Fp8Cast out;
  auto captured_state = state.clone();  // what the capture's own launch does to the state is not replayed
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    graph.capture_begin();
    out = model::fp8_cast_delayed(x, kE5M2, model::Fp8Copies::both, state, false);
    graph.capture_end();
  }
  c10::cuda::getCurrentCUDAStream().synchronize();
  ASSERT_TRUE(at::equal(state, captured_state));  // capturing launches nothing
  for (int i = 1; i <= 20; ++i) {
    x.copy_(delayed_input(t, i));
    graph.replay();
    const auto want = model::fp8_cast_delayed_composite(x, kE5M2, model::Fp8Copies::both, composite_state, false);
    c10::cuda::getCurrentCUDAStream().synchronize();
    ASSERT_TRUE(same_bytes(out.q, want.q)) << "replay " << i;
    ASSERT_TRUE(same_bytes(out.qt, want.qt)) << "replay " << i;
    ASSERT_TRUE(at::equal(out.inv_scale, want.inv_scale)) << "replay " << i;
    ASSERT_TRUE(at::equal(state, composite_state)) << "replay " << i;
  }
}

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return std::string(meshtrain::testing_support::kCudaKernels ? "" : "built without CUDA: no FP8 cast kernels to test");
  });
}
