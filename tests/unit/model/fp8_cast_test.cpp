// FP8 casts off the GPU (model/kernels/fp8_cast.h, model/linear/fp8_shared_input.h): the composite cast that defines the
// CUDA kernels' result — each copy dequantizes within the format's rounding, the largest element lands on the
// format's largest, the transpose's scales are the columns' — and the sharing of one input's casts among the
// layers that read it: shared while the same tensor comes unchanged, cast again after a change in place, for
// another tensor or view, and after the group's last reader; delayed scaling's amax history: the first cast is
// tensorwise, the next ones scale from the last 16 casts' amaxes (non-finite ones left out), a shared input one
// site. The kernels themselves: tests/gpu/fp8_cast_test.cpp.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "meshtrain/model/kernels/fp8_cast.h"
#include "meshtrain/model/linear/fp8_amax_history.h"
#include "meshtrain/model/linear/fp8_shared_input.h"

using namespace meshtrain;
using model::Fp8Copies;

namespace {

constexpr at::ScalarType kE4M3 = at::kFloat8_e4m3fn;

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a.view(at::kByte), b.view(at::kByte));
}

}  // namespace

TEST(Fp8Cast, CompositeCopiesDequantizeWithinTheFormatsRounding) {
  at::manual_seed(0);
  auto t = at::randn({24, 40});
  t.slice(0, 3, 4).mul_(100);  // an outlier row
  for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    const auto c = model::fp8_cast(t, s, kE4M3, Fp8Copies::both);  // CPU: the composite
    ASSERT_EQ(c.q.scalar_type(), kE4M3);
    ASSERT_EQ(c.qt.sizes(), at::IntArrayRef({40, 24}));
    for (auto [q, inv, ref] : {std::tuple{c.q, c.inv_scale, t}, std::tuple{c.qt, c.inv_scale_t, t.t()}}) {
      const auto deq = q.to(at::kFloat) * inv;
      // Half an e4m3 unit in the last place (2⁻⁴ relative), or half the smallest subnormal (2⁻¹⁰) scaled.
      const auto bound = at::maximum(ref.abs() * 0x1p-4, inv.expand_as(ref) * 0x1p-10) * (1 + 1e-6);
      EXPECT_TRUE(((deq - ref).abs() <= bound).all().item<bool>());
      EXPECT_EQ(q.to(at::kFloat).abs().max().item<float>(), 448.f);
    }
    if (s == Fp8Scaling::rowwise) {
      EXPECT_EQ(c.inv_scale.sizes(), at::IntArrayRef({24, 1}));
      EXPECT_EQ(c.inv_scale_t.sizes(), at::IntArrayRef({40, 1}));
      // Every row of each copy reaches the format's largest: each has its own scale.
      EXPECT_TRUE((c.qt.to(at::kFloat).abs().amax({1}) == 448).all().item<bool>());
      EXPECT_TRUE((c.q.to(at::kFloat).abs().amax({1}) == 448).all().item<bool>());
    } else {
      EXPECT_TRUE(at::equal(c.inv_scale, c.inv_scale_t));
      EXPECT_EQ(c.inv_scale.dim(), 0);
    }
  }
}

TEST(Fp8Cast, AmaxOfTensorRowsAndColumns) {
  auto t = at::tensor({1.f, -5.f, 2.f, 3.f, 0.f, -4.f}).view({2, 3});
  const auto a = model::fp8_amax(t, true, true, true);
  EXPECT_EQ(a.tensor.item<float>(), 5.f);
  EXPECT_TRUE(at::equal(a.rows, at::tensor({5.f, 4.f})));
  EXPECT_TRUE(at::equal(a.cols, at::tensor({3.f, 5.f, 4.f})));
  EXPECT_FALSE(model::fp8_amax(t, false, true, false).cols.defined());
}

TEST(Fp8SharedInput, SharedByTheGroupsReadersThenLetGo) {
  model::Fp8SharedInput shared(3);
  const auto x = at::randn({4, 8, 32});
  const auto a = shared.cast(x.reshape({-1, 32}), Fp8Scaling::tensorwise);  // each reader reshapes: a new view
  const auto b = shared.cast(x.reshape({-1, 32}), Fp8Scaling::tensorwise);
  const auto c = shared.cast(x.reshape({-1, 32}), Fp8Scaling::tensorwise);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a.get(), c.get());
  EXPECT_EQ(shared.casts_made(), 1);
  const auto fresh = model::fp8_cast(x.reshape({-1, 32}), Fp8Scaling::tensorwise, kE4M3, Fp8Copies::both);
  EXPECT_TRUE(same_bytes(a->q, fresh.q));
  EXPECT_TRUE(same_bytes(a->qt, fresh.qt));
  // The next forward: the group was served, the copies let go; the same tensor is cast again.
  const auto d = shared.cast(x.reshape({-1, 32}), Fp8Scaling::tensorwise);
  EXPECT_NE(d.get(), a.get());
  EXPECT_EQ(shared.casts_made(), 2);
}

TEST(Fp8SharedInput, CastAgainForAChangeAnotherTensorAnotherViewOrScaling) {
  model::Fp8SharedInput shared(2);
  auto x = at::randn({16, 32});
  const auto a = shared.cast(x, Fp8Scaling::rowwise);
  x.mul_(3);  // in place: the version counter moves
  const auto b = shared.cast(x, Fp8Scaling::rowwise);
  EXPECT_NE(a.get(), b.get());
  EXPECT_TRUE(same_bytes(b->q, model::fp8_cast(x, Fp8Scaling::rowwise, kE4M3, Fp8Copies::rowmajor).q));
  EXPECT_EQ(shared.casts_made(), 2);
  (void)shared.cast(x, Fp8Scaling::rowwise);
  EXPECT_EQ(shared.casts_made(), 2);  // b's group is served now
  const auto c = shared.cast(x, Fp8Scaling::rowwise);
  EXPECT_NE(shared.cast(x.clone(), Fp8Scaling::rowwise).get(), c.get());  // another tensor, same values
  const auto big = at::randn({17, 32});
  const auto d = shared.cast(big.slice(0, 0, 16), Fp8Scaling::tensorwise);
  EXPECT_NE(shared.cast(big.slice(0, 1, 17), Fp8Scaling::tensorwise).get(), d.get());  // another view
  const auto e = shared.cast(x, Fp8Scaling::tensorwise);
  EXPECT_NE(shared.cast(x, Fp8Scaling::rowwise).get(), e.get());  // another scaling
  EXPECT_EQ(shared.casts_made(), 8);
}

TEST(Fp8SharedInput, InferenceTensorsAreCastEveryTime) {
  model::Fp8SharedInput shared(2);
  c10::InferenceMode guard;
  const auto x = at::randn({16, 32});
  const auto a = shared.cast(x, Fp8Scaling::tensorwise);
  const auto b = shared.cast(x, Fp8Scaling::tensorwise);
  EXPECT_NE(a.get(), b.get());
  EXPECT_TRUE(same_bytes(a->q, b->q));
}

// Delayed scaling (model/linear/fp8_amax_history.h), on the CPU: the composite that defines the kernel's result.
TEST(Fp8AmaxHistory, FirstCastIsTensorwiseThenTheLastSixteenCastsScale) {
  at::manual_seed(7);
  const auto t = at::randn({16, 32});
  model::Fp8AmaxHistory h;
  const auto first = h.cast(t, kE4M3, Fp8Copies::both);
  const auto tensorwise = model::fp8_cast(t, Fp8Scaling::tensorwise, kE4M3, Fp8Copies::both);
  EXPECT_TRUE(same_bytes(first.q, tensorwise.q));
  EXPECT_TRUE(same_bytes(first.qt, tensorwise.qt));
  EXPECT_TRUE(at::equal(first.inv_scale, tensorwise.inv_scale));
  EXPECT_TRUE(at::equal(first.inv_scale_t, tensorwise.inv_scale_t));
  // Four times larger: scaled from the first cast's amax, so the top three quarters of the range saturate.
  const auto big = h.cast(t * 4, kE4M3, Fp8Copies::rowmajor);
  EXPECT_TRUE(at::equal(big.inv_scale, first.inv_scale));
  const auto scale = 448.0 / t.abs().max().clamp_min(1e-12);  // the composite's tensorwise scale of t
  EXPECT_TRUE(same_bytes(big.q, (t * 4 * scale).clamp(-448, 448).to(kE4M3)));
  // Smaller casts after it: the window holds the large amax for 16 casts, then lets it go.
  for (int i = 2; i < 18; ++i) {
    const auto c = h.cast(t / 8, kE4M3, Fp8Copies::rowmajor);
    EXPECT_TRUE(at::equal(c.inv_scale, first.inv_scale * 4)) << "cast " << i;
  }
  const auto after = h.cast(t / 8, kE4M3, Fp8Copies::rowmajor);
  EXPECT_TRUE(at::equal(after.inv_scale, first.inv_scale / 8));
  EXPECT_EQ(h.casts(), 19);
  EXPECT_EQ(h.state()[0].item<int>(), 19);
}

TEST(Fp8AmaxHistory, NonFiniteAmaxesAreLeftOutOfTheWindow) {
  const auto t = at::randn({16, 32});
  model::Fp8AmaxHistory h;
  const auto first = h.cast(t, at::kFloat8_e5m2, Fp8Copies::both);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto u = t.clone();
    u[3][5] = bad;
    const auto c = h.cast(u, at::kFloat8_e5m2, Fp8Copies::both);  // scaled from the finite history
    EXPECT_TRUE(at::equal(c.inv_scale, first.inv_scale));
    EXPECT_EQ(c.q.to(at::kFloat).isnan().sum().item<int64_t>(), std::isnan(bad) ? 1 : 0);
  }
  const auto next = h.cast(t, at::kFloat8_e5m2, Fp8Copies::both);  // the NaN and inf amaxes recorded, not used
  EXPECT_TRUE(at::equal(next.inv_scale, first.inv_scale));
  EXPECT_TRUE(same_bytes(next.q, first.q));
}

TEST(Fp8AmaxHistory, RefusesAMisstatedFirstCastAndOtherScalings) {
  const auto t = at::randn({16, 32});
  const auto state = at::zeros({model::fp8_delayed_state_size()}, at::kInt);
  EXPECT_THROW(model::fp8_cast_delayed_composite(t, kE4M3, Fp8Copies::both, state, /*first=*/false), Error);
  EXPECT_THROW(model::fp8_cast_delayed(t, kE4M3, Fp8Copies::both, state.narrow(0, 0, 3), true), Error);
  EXPECT_THROW(model::fp8_cast(t, Fp8Scaling::delayed, kE4M3, Fp8Copies::both), Error);
}

TEST(Fp8SharedInput, DelayedScalingCastsTheSharedInputAtOneSite) {
  model::Fp8SharedInput shared(2);
  const auto x = at::randn({16, 32});
  const auto a = shared.cast(x, Fp8Scaling::delayed);
  EXPECT_EQ(shared.cast(x, Fp8Scaling::delayed).get(), a.get());
  const auto b = shared.cast(x * 2, Fp8Scaling::delayed);  // the next forward: scaled from the first's amax
  EXPECT_TRUE(at::equal(b->inv_scale, a->inv_scale));
  EXPECT_EQ(shared.casts_made(), 2);
}
