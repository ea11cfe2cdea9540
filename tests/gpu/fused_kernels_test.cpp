// The fused CUDA kernels (model/kernels/fused_*.h) and the cuBLASLt epilogues (model/kernels/lt_matmul.h, bias_linear.h,
// gelu_mlp.h) against the composite ATen ops they replace, on the GPU: fp32 and bf16, forward and gradients,
// odd sizes (vocabularies that are multiples of nothing, misaligned rows and pointers that take the kernels'
// scalar paths) and the model's loss with fused_kernels on and off and with each of fused_norm / fused_gelu
// off on its own.
// Tolerances: fp32 within float rounding of the composite; bf16 within one bf16 rounding (2⁻⁸ relative) of
// the fp32 result computed from the same bf16 inputs, since each kernel rounds once, at its store.
// Exit code 77 (skipped) without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <c10/util/accumulate.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "meshtrain/model/activation_checkpoint.h"
#include "meshtrain/model/linear/bias_linear.h"
#include "meshtrain/model/kernels/column_sum.h"
#include "meshtrain/model/kernels/fused_add_norm.h"
#include "meshtrain/model/kernels/fused_cross_entropy.h"
#include "meshtrain/model/linear/fused_linear_gelu.h"
#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/kernels/fused_swiglu.h"
#include "meshtrain/model/linear/gelu_mlp.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/kernels/lt_matmul.h"
#include "meshtrain/model/linear/master_linear.h"
#include "meshtrain/model/linear/residual_linear.h"
#include "meshtrain/model/rotary.h"
#include "meshtrain/model/linear/shared_input_linears.h"
#include "meshtrain/model/transformer.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

// Whether `y` came out of the named fused autograd function (and not its composite fallback), looking
// through the view back to the caller's shape that the ops put on top of their [rows, D] results.
bool made_by(const at::Tensor& y, const std::string& fn) {
  auto node = y.grad_fn();
  while (node && node->name().find("ViewBackward") != std::string::npos && node->num_outputs() > 0)
    node = node->next_edge(0).function;
  return node && node->name().find(fn) != std::string::npos;
}

// max |a − b| − (atol + rtol·|b|) ≤ 0 everywhere, in fp32; the report names the worst element's excess.
::testing::AssertionResult close(const at::Tensor& a, const at::Tensor& b, double rtol, double atol) {
  auto af = a.to(at::kFloat), bf = b.to(at::kFloat);
  auto excess = (af - bf).abs() - (atol + rtol * bf.abs());
  const double worst = excess.max().item<double>();
  if (worst <= 0 && !af.isnan().any().item<bool>()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exceeds tolerance by " << worst << " (max |a-b| "
                                       << (af - bf).abs().max().item<double>() << ")";
}

// close() with the absolute floor a fraction of b's largest magnitude: for sums over many rows (weight and
// bias gradients, matmuls), whose elements near zero carry the rounding of the large ones.
::testing::AssertionResult close_scaled(const at::Tensor& a, const at::Tensor& b, double rtol, double frac) {
  return close(a, b, rtol, frac * b.to(at::kFloat).abs().max().item<double>() + 1e-12);
}

// Runs f with CUDA autocast in `dt` on (and off again afterwards, its cast cache cleared).
template <typename F>
void under_autocast(at::ScalarType dt, F&& f) {
  // Switched off again however f ends: an exception in one test must not leave autocast on for the next.
  struct Off {
    ~Off() {
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
    }
  } off;
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dt);
  f();
}

}  // namespace

TEST(FusedCrossEntropyGpu, MatchesCrossEntropyInValueAndGradient) {
  struct Case {
    int64_t N, V;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{1, 1}, Case{3, 5}, Case{7, 50257}, Case{33, 1000}, Case{64, 32003}, Case{5, 128256}}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " N=" << c.N << " V=" << c.V
                                          << " in_place=" << in_place);
        at::manual_seed(c.N * 7 + c.V);
        auto x0 = (at::randn({c.N, c.V}, kCuda) * 3).to(dt);
        auto t = at::randint(0, c.V, {c.N}, kCuda.dtype(at::kLong));
        if (c.N > 1) t.slice(0, 0, c.N, 4).fill_(-100);  // every 4th row ignored

        auto xr = x0.clone().requires_grad_(true);
        auto ref = at::cross_entropy_loss(xr.to(at::kFloat), t);
        (ref * 0.37).backward();

        auto x = x0.clone().requires_grad_(true);
        auto z = x.clone();  // the tensor the in-place backward overwrites
        auto loss = model::fused_cross_entropy(z, t, -100, in_place);
        ASSERT_TRUE(made_by(loss, "FusedCrossEntropy"));
        EXPECT_EQ(loss.scalar_type(), at::kFloat);
        EXPECT_TRUE(close(loss, ref, 1e-5, 1e-6));
        (loss * 0.37).backward();
        const bool fp32 = dt == at::kFloat;
        // Gradients are ~p/N: the absolute floor scales with that.
        EXPECT_TRUE(close(x.grad(), xr.grad(), fp32 ? 1e-4 : 1e-2, 1e-7));
        if (in_place) EXPECT_TRUE(at::equal(z.detach(), x.grad()));
        else EXPECT_TRUE(at::equal(z.detach(), x0));
      }
    }
  }
}

TEST(FusedCrossEntropyGpu, StridedLogitsAllIgnoredAndSecondBackward) {
  at::manual_seed(1);
  // Column stride ≠ 1: the op copies, the kernel sees unit stride.
  auto base = at::randn({301, 9}, kCuda).requires_grad_(true);
  auto logits = base.t();  // [9, 301], strides (1, 9)
  auto t = at::randint(0, 301, {9}, kCuda.dtype(at::kLong));
  auto loss = model::fused_cross_entropy(logits, t);
  auto ref_in = base.detach().t().clone().requires_grad_(true);
  auto ref = at::cross_entropy_loss(ref_in, t);
  EXPECT_TRUE(close(loss, ref, 1e-5, 1e-6));
  loss.backward();
  ref.backward();
  EXPECT_TRUE(close(base.grad().t(), ref_in.grad(), 1e-4, 1e-8));

  // No row counts: NaN, as PyTorch's mean.
  auto none = model::fused_cross_entropy(at::randn({4, 10}, kCuda), at::full({4}, -100, kCuda.dtype(at::kLong)));
  EXPECT_TRUE(std::isnan(none.item<float>()));

  // In place: a second backward through the same graph is refused (the logits are gone).
  auto x = at::randn({3, 10}, kCuda).requires_grad_(true);
  auto l = model::fused_cross_entropy(x * 1, at::zeros({3}, kCuda.dtype(at::kLong)), -100, true);
  l.backward({}, /*retain_graph=*/true);
  EXPECT_ANY_THROW(l.backward());
}

TEST(FusedCrossEntropyGpu, PaddedColumnsLeftOutWithZeroGradient) {
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " in_place=" << in_place);
      at::manual_seed(5);
      const int64_t N = 37, V = 50257, padded = 50304;
      auto x0 = (at::randn({N, padded}, kCuda) * 3).to(dt);
      auto t = at::randint(0, V, {N}, kCuda.dtype(at::kLong));
      t[4] = -100;
      auto xr = x0.narrow(1, 0, V).clone().requires_grad_(true);
      auto ref = at::cross_entropy_loss(xr.to(at::kFloat), t);
      ref.backward();
      auto x = x0.clone().requires_grad_(true);
      auto z = x.clone();
      auto loss = model::fused_cross_entropy(z, t, -100, in_place, V);
      ASSERT_TRUE(made_by(loss, "FusedCrossEntropy"));
      EXPECT_TRUE(close(loss, ref, 1e-5, 1e-6));
      loss.backward();
      const bool fp32 = dt == at::kFloat;
      EXPECT_TRUE(close(x.grad().narrow(1, 0, V), xr.grad(), fp32 ? 1e-4 : 1e-2, 1e-7));
      EXPECT_EQ(x.grad().narrow(1, V, padded - V).abs().max().item<float>(), 0.f);
    }
  }
}

TEST(FusedRopeGpu, MatchesApplyRopeForwardAndBackward) {
  struct Case {
    int64_t B, T, H, hd;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{2, 17, 3, 64}, Case{1, 5, 2, 6}, Case{2, 33, 4, 128}, Case{3, 1, 8, 16}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " B=" << c.B << " T=" << c.T << " H=" << c.H
                                        << " hd=" << c.hd);
      at::manual_seed(c.T * 31 + c.hd);
      auto inv = model::rope_inv_freq(c.hd, 500000.0, model::RopeScaling{.factor = 8.0}).to(at::kCUDA);
      auto [cos, sin] = model::rope_tables(inv, 3, c.T);
      // As attention lays it out: the [B, H, T, hd] view of a [B, T, H, hd] projection.
      auto base0 = at::randn({c.B, c.T, c.H, c.hd}, kCuda).to(dt);
      auto dy = at::randn({c.B, c.H, c.T, c.hd}, kCuda).to(dt);

      auto base = base0.clone().requires_grad_(true);
      auto y = model::fused_rope(base.transpose(1, 2), cos, sin);
      ASSERT_TRUE(made_by(y, "FusedRope"));
      EXPECT_TRUE(y.transpose(1, 2).is_contiguous());  // the input's layout, as the composite keeps it
      EXPECT_EQ(y.scalar_type(), dt);
      (y * dy).sum().backward();

      // Reference: the composite in fp32 on the same (rounded) inputs.
      auto ref_in = base0.to(at::kFloat).requires_grad_(true);
      auto yr = model::apply_rope(ref_in.transpose(1, 2), cos, sin);
      (yr * dy.to(at::kFloat)).sum().backward();
      const bool fp32 = dt == at::kFloat;
      EXPECT_TRUE(close(y, yr, fp32 ? 1e-5 : 8e-3, 1e-5));
      EXPECT_TRUE(close(base.grad(), ref_in.grad(), fp32 ? 1e-5 : 8e-3, 1e-5));
    }
  }
}

TEST(FusedSwigluGpu, MatchesSiluTimesUpAndBothGradients) {
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    // Odd count (scalar path); aligned (vector path); offset by one element (misaligned: scalar path).
    for (int64_t offset : {0, 1}) {
      for (auto shape : {std::vector<int64_t>{3, 5, 37}, std::vector<int64_t>{4, 64, 1024}}) {
        SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " offset=" << offset << " numel="
                                          << c10::multiply_integers(shape));
        at::manual_seed(offset + shape.back());
        const int64_t n = c10::multiply_integers(shape);
        auto g0 = (at::randn({n + offset}, kCuda) * 2).to(dt).narrow(0, offset, n).view(shape);
        auto u0 = at::randn({n + offset}, kCuda).to(dt).narrow(0, offset, n).view(shape);
        auto dy = at::randn(shape, kCuda).to(dt);

        auto g = g0.detach().requires_grad_(true), u = u0.detach().requires_grad_(true);
        auto y = model::fused_swiglu(g, u);
        ASSERT_TRUE(made_by(y, "FusedSwiglu"));
        (y * dy).sum().backward();

        auto gr = g0.to(at::kFloat).requires_grad_(true), ur = u0.to(at::kFloat).requires_grad_(true);
        auto yr = at::silu(gr) * ur;
        (yr * dy.to(at::kFloat)).sum().backward();
        const bool fp32 = dt == at::kFloat;
        EXPECT_TRUE(close(y, yr, fp32 ? 1e-5 : 8e-3, 1e-6));
        EXPECT_TRUE(close(g.grad(), gr.grad(), fp32 ? 1e-5 : 8e-3, 1e-6));
        EXPECT_TRUE(close(u.grad(), ur.grad(), fp32 ? 1e-5 : 8e-3, 1e-6));
      }
    }
  }
}

// The two halves of one [rows, 2·F] tensor (the inference path's fused gate and up GEMM output), read in place by
// the kernel: the same values and gradients as silu(gate)·up, for F on the vector path (1024) and off it (37).
TEST(FusedSwigluGpu, HalvesOfOneTensorReadInPlace) {
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t F : {1024, 37}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " F=" << F);
      at::manual_seed(F);
      const auto gu0 = (at::randn({3, 5, 2 * F}, kCuda) * 2).to(dt);
      auto gu = gu0.detach().requires_grad_(true);
      auto g = gu.narrow(-1, 0, F), u = gu.narrow(-1, F, F);
      ASSERT_FALSE(g.is_contiguous());
      auto y = model::fused_swiglu(g, u);
      ASSERT_TRUE(made_by(y, "FusedSwiglu"));
      const auto dy = at::randn(y.sizes(), kCuda).to(dt);
      (y * dy).sum().backward();
      auto gur = gu0.to(at::kFloat).requires_grad_(true);
      auto yr = at::silu(gur.narrow(-1, 0, F)) * gur.narrow(-1, F, F);
      (yr * dy.to(at::kFloat)).sum().backward();
      const bool fp32 = dt == at::kFloat;
      EXPECT_TRUE(close(y, yr, fp32 ? 1e-5 : 8e-3, 1e-6));
      EXPECT_TRUE(close(gu.grad(), gur.grad(), fp32 ? 1e-5 : 8e-3, 1e-6));
    }
  }
}

// x + r and its norm against the composite in fp32 on the same (rounded) inputs: both outputs and all four
// gradients (∂h flowing in from h's other use as well as ∂y), LayerNorm and RMSNorm, bf16/fp32/mixed addends
// (fp32 residual stream + bf16 branch under autocast, where y comes out in bf16), widths that are multiples
// of nothing and wider than a block, row counts across several weight-gradient chunks.
TEST(FusedAddNormGpu, MatchesAddThenNormInValuesAndAllGradients) {
  struct Types {
    at::ScalarType x, r;
    bool autocast;
  };
  struct Case {
    int64_t rows, D;
  };
  for (bool rms : {false, true}) {
    for (Types t : {Types{at::kFloat, at::kFloat, false}, Types{at::kBFloat16, at::kBFloat16, false},
                    Types{at::kFloat, at::kBFloat16, true}}) {
      // Rows held in registers (D a multiple of 8, at most 8,192) and the strided kernels (other D; 8,200 is
      // 1,025 packs of 8, one more than a block's threads).
      for (Case c : {Case{1, 5}, Case{7, 37}, Case{300, 768}, Case{530, 1000}, Case{3, 4099}, Case{33, 8192},
                     Case{17, 8200}}) {
        SCOPED_TRACE(::testing::Message() << (rms ? "rms" : "layer") << " x=" << c10::toString(t.x) << " r="
                                          << c10::toString(t.r) << " autocast=" << t.autocast << " rows=" << c.rows
                                          << " D=" << c.D);
        at::manual_seed(c.rows * 13 + c.D + rms);
        const double eps = 1e-5;
        auto x0 = (at::randn({c.rows, c.D}, kCuda) + 0.5).to(t.x);
        auto r0 = at::randn({c.rows, c.D}, kCuda).to(t.r);
        auto w0 = at::randn({c.D}, kCuda) * 0.5 + 1, b0 = at::randn({c.D}, kCuda) * 0.1;
        auto x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
        auto w = w0.clone().requires_grad_(true), b = rms ? at::Tensor() : b0.clone().requires_grad_(true);
        at::Tensor h, y;
        auto run = [&] { std::tie(h, y) = model::fused_add_norm(x, r, w, b, rms, eps); };
        if (t.autocast) under_autocast(at::kBFloat16, run);
        else run();
        ASSERT_TRUE(made_by(y, "FusedAddNorm"));
        const auto h_type = at::promote_types(t.x, t.r);
        EXPECT_EQ(h.scalar_type(), h_type);
        EXPECT_EQ(y.scalar_type(), t.autocast ? at::kBFloat16 : h_type);
        auto dh = at::randn({c.rows, c.D}, kCuda).to(h_type), dy = at::randn({c.rows, c.D}, kCuda).to(y.scalar_type());
        ((h * dh).sum() + (y * dy).sum()).backward();

        // Reference: fp32 throughout, from the sum rounded as the kernel stores it.
        auto xr = x0.to(at::kFloat).requires_grad_(true), rr = r0.to(at::kFloat).requires_grad_(true);
        auto wr = w0.clone().requires_grad_(true), br = rms ? at::Tensor() : b0.clone().requires_grad_(true);
        auto hr = xr + rr;
        auto hn = hr + (hr.detach().to(h_type).to(at::kFloat) - hr.detach());  // rounded value, gradient of hr
        auto yr = rms ? at::rms_norm(hn, {c.D}, wr, eps) : at::layer_norm(hn, {c.D}, wr, br, eps);
        ((hr * dh.to(at::kFloat)).sum() + (yr * dy.to(at::kFloat)).sum()).backward();

        EXPECT_TRUE(at::equal(h, hn.detach().to(h_type)));
        const bool bf16_y = y.scalar_type() == at::kBFloat16, bf16_h = h_type == at::kBFloat16;
        EXPECT_TRUE(close(y, yr, bf16_y ? 8e-3 : 1e-4, 1e-4));
        // ∂x = ∂r = ∂h (rounded once to h's type, then to each addend's).
        const double g_rtol = bf16_h || t.r == at::kBFloat16 ? 8e-3 : 1e-4;
        EXPECT_TRUE(close_scaled(r.grad(), rr.grad(), g_rtol, 1e-4));
        EXPECT_TRUE(close_scaled(x.grad(), xr.grad(), bf16_h ? 8e-3 : 1e-4, 1e-4));
        EXPECT_EQ(x.grad().scalar_type(), t.x);
        EXPECT_EQ(r.grad().scalar_type(), t.r);
        // Weight gradients: fp32 sums of the same products in another order.
        EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), 1e-3, 1e-4));
        if (!rms) {
          EXPECT_TRUE(close_scaled(b.grad(), br.grad(), 1e-3, 1e-4));
        }
      }
    }
  }
}

// The norm alone (attn_norm's case: no add before it), LayerNorm and RMSNorm, fp32 and bf16 input, and
// fp32 input under autocast (bf16 out): value and the gradients of x, weight and bias.
// With `pass` (fused_norm_pass), x comes back as a second output whose gradient the backward adds to the
// norm's; a misaligned x (storage offset of 4 elements) takes the strided kernels at a size that would
// otherwise be held in registers.
TEST(FusedNormGpu, MatchesNormInValueAndGradients) {
  for (bool rms : {false, true}) {
    for (auto [dt, autocast] : {std::pair{at::kFloat, false}, std::pair{at::kBFloat16, false}, std::pair{at::kFloat, true}}) {
      for (auto [D, pass, offset] : {std::tuple<int64_t, bool, int64_t>{5, false, 0}, {768, false, 0}, {2053, false, 0},
                                     {768, true, 0}, {2048, true, 4}, {8192, true, 0}}) {
        SCOPED_TRACE(::testing::Message() << (rms ? "rms" : "layer") << " " << c10::toString(dt) << " autocast="
                                          << autocast << " D=" << D << " pass=" << pass << " offset=" << offset);
        at::manual_seed(D + rms);
        const int64_t rows = 257;
        auto x0 = (at::randn({rows, D}, kCuda) * 2 + 0.3).to(dt);
        auto w0 = at::randn({D}, kCuda) * 0.5 + 1, b0 = at::randn({D}, kCuda) * 0.1;
        auto store = at::zeros({rows * D + offset}, x0.options());
        store.narrow(0, offset, rows * D).copy_(x0.view({-1}));
        store.requires_grad_(true);
        const auto x = store.narrow(0, offset, rows * D).view({rows, D});
        auto w = w0.clone().requires_grad_(true);
        auto b = rms ? at::Tensor() : b0.clone().requires_grad_(true);
        at::Tensor xs, y;
        auto run = [&] {
          if (pass) std::tie(xs, y) = model::fused_norm_pass(x.view({1, rows, D}), w, b, rms, 1e-5);
          else y = model::fused_norm(x.view({1, rows, D}), w, b, rms, 1e-5);
        };
        if (autocast) under_autocast(at::kBFloat16, run);
        else run();
        ASSERT_TRUE(made_by(y, "FusedNorm"));
        EXPECT_EQ(y.sizes(), (std::vector<int64_t>{1, rows, D}));
        EXPECT_EQ(y.scalar_type(), autocast ? at::kBFloat16 : dt);
        auto dy = at::randn(y.sizes(), kCuda).to(y.scalar_type());
        auto dxs = at::randn({1, rows, D}, kCuda).to(dt);
        if (pass) {
          EXPECT_TRUE(at::equal(xs, x.view({1, rows, D})));
          ((y * dy).sum() + (xs * dxs).sum()).backward();
        } else {
          (y * dy).sum().backward();
        }

        auto xr = x0.to(at::kFloat).requires_grad_(true), wr = w0.clone().requires_grad_(true);
        auto br = rms ? at::Tensor() : b0.clone().requires_grad_(true);
        auto yr = rms ? at::rms_norm(xr, {D}, wr, 1e-5) : at::layer_norm(xr, {D}, wr, br, 1e-5);
        auto ref_loss = (yr * dy.view({rows, D}).to(at::kFloat)).sum();
        if (pass) ref_loss = ref_loss + (xr * dxs.view({rows, D}).to(at::kFloat)).sum();
        ref_loss.backward();
        const auto xg = store.grad().narrow(0, offset, rows * D).view({rows, D});
        const bool bf16_y = y.scalar_type() == at::kBFloat16;
        EXPECT_TRUE(close(y.view({rows, D}), yr, bf16_y ? 8e-3 : 1e-4, 1e-4));
        EXPECT_TRUE(close_scaled(xg, xr.grad(), dt == at::kBFloat16 ? 8e-3 : 1e-4, 1e-4));
        EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), 1e-3, 1e-4));
        if (!rms) {
          EXPECT_TRUE(close_scaled(b.grad(), br.grad(), 1e-3, 1e-4));
        }
      }
    }
  }
}

// The first block's norm told that its input is rows of the embedding table (model/table_rows.h): its backward
// gathers them again, so the graph holds no copy of x between the forward and the backward (the allocator's count
// after the forward is x's bytes lower), and every gradient (the table's, through the embedding, and γ's, β's) is
// bit for bit what keeping x gives. RMSNorm and LayerNorm, an fp32 table under bf16 autocast as the model runs
// and a bf16 table (a frozen LoRA base's) without.
TEST(FusedNormGpu, RowsOfTheTableAreGatheredAgainNotKept) {
  const auto allocated = [] {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  };
  const int64_t V = 1000, D = 2048;
  for (bool rms : {true, false}) {
    for (auto [dt, autocast] : {std::pair{at::kFloat, true}, std::pair{at::kBFloat16, false}}) {
      SCOPED_TRACE(::testing::Message() << (rms ? "rms " : "layer ") << c10::toString(dt));
      at::manual_seed(11);
      const auto table0 = at::randn({V, D}, kCuda).to(dt), w0 = at::randn({D}, kCuda) * 0.5 + 1;
      const auto b0 = at::randn({D}, kCuda) * 0.1, ids = at::randint(0, V, {2, 129}, kCuda.dtype(at::kLong));
      const auto dy = at::randn({2, 129, D}, kCuda), dxs = at::randn({2, 129, D}, kCuda);
      std::vector<std::vector<at::Tensor>> grads;
      std::vector<int64_t> held;
      for (bool gather : {false, true}) {
        auto table = table0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        auto b = rms ? at::Tensor() : b0.clone().requires_grad_(true);
        const model::TableRows rows{table, ids};
        at::Tensor y, xs;
        const int64_t before = allocated();
        auto run = [&] {
          const auto x = at::embedding(table, ids);
          std::tie(xs, y) = model::fused_norm_pass(x, w, b, rms, 1e-5, gather ? &rows : nullptr);
        };
        if (autocast) under_autocast(at::kBFloat16, run);
        else run();
        ASSERT_TRUE(made_by(y, "FusedNorm"));
        auto loss = (y.to(at::kFloat) * dy).sum() + (xs.to(at::kFloat) * dxs).sum();
        xs = at::Tensor();  // the block's residual add is done with it
        held.push_back(allocated() - before);
        loss.backward();
        grads.push_back({table.grad(), w.grad(), rms ? w.grad() : b.grad()});
      }
      EXPECT_EQ(held[0] - held[1], 2 * 129 * D * c10::elementSize(dt));
      for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(at::equal(grads[0][i], grads[1][i])) << "gradient " << i;
    }
  }
}

// A bf16 model's norms read their bf16 γ and β in place (no fp32 copy a step). The kernels widen each weight to
// fp32 as they load it, so the results are bit for bit those of fp32 weights holding the same values: h, y
// and ∂x, ∂r exactly, and each weight gradient the fp32 one rounded once to its parameter's dtype. Also a bf16
// γ beside an fp32 β (both read as fp32), whose β gradient stays fp32. With and without the add, LayerNorm and
// RMSNorm, the row-resident (768) and strided (2,053) kernels, under autocast as the model runs.
TEST(FusedAddNormGpu, Bf16WeightsAreReadAsTheyAreAndGiveTheFp32WeightsResults) {
  for (bool rms : {false, true}) {
    for (bool add : {true, false}) {
      for (int64_t D : {768, 2053}) {
        for (auto b_type : {at::kBFloat16, at::kFloat}) {
          if (rms && b_type == at::kFloat) continue;
          SCOPED_TRACE(::testing::Message() << (rms ? "rms" : "layer") << " add=" << add << " D=" << D
                                            << " bias=" << c10::toString(b_type));
          at::manual_seed(D + rms + add);
          const int64_t rows = 67;
          auto x0 = (at::randn({rows, D}, kCuda) + 0.5), r0 = at::randn({rows, D}, kCuda).to(at::kBFloat16);
          auto w16 = (at::randn({D}, kCuda) * 0.5 + 1).to(at::kBFloat16), b16 = (at::randn({D}, kCuda) * 0.1);
          auto dh = at::randn({rows, D}, kCuda), dy = at::randn({rows, D}, kCuda).to(at::kBFloat16);
          // One run: weights in the given dtypes → {h, y, ∂x, ∂r, ∂γ, ∂β}.
          auto run = [&](at::ScalarType wt, at::ScalarType bt) {
            auto x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
            // Fresh leaves: to() returns the tensor itself where the dtype is already its own.
            auto w = w16.to(wt).clone().requires_grad_(true);
            auto b = rms ? at::Tensor() : b16.to(b_type).to(bt).clone().requires_grad_(true);
            at::Tensor h, y;
            under_autocast(at::kBFloat16, [&] {
              if (add) std::tie(h, y) = model::fused_add_norm(x, r, w, b, rms, 1e-5);
              else y = model::fused_norm(x, w, b, rms, 1e-5);
            });
            EXPECT_TRUE(made_by(y, add ? "FusedAddNorm" : "FusedNorm"));
            auto loss = (y * dy).sum();
            if (add) loss = loss + (h * dh).sum();
            loss.backward();
            return std::vector<at::Tensor>{add ? h.detach() : x0, y.detach(), x.grad(), add ? r.grad() : r0,
                                           w.grad(), rms ? at::zeros({1}, kCuda) : b.grad()};
          };
          const auto held = run(at::kBFloat16, b_type), wide = run(at::kFloat, at::kFloat);
          const char* what[] = {"h", "y", "dx", "dr", "dgamma", "dbeta"};
          for (int i = 0; i < 4; ++i) EXPECT_TRUE(at::equal(held[i], wide[i])) << what[i];
          EXPECT_EQ(held[4].scalar_type(), at::kBFloat16);
          EXPECT_TRUE(at::equal(held[4], wide[4].to(at::kBFloat16))) << what[4];
          if (!rms) {
            EXPECT_EQ(held[5].scalar_type(), b_type);
            EXPECT_TRUE(at::equal(held[5], wide[5].to(b_type))) << what[5];
          }
        }
      }
    }
  }
}

// The fused linear + GELU against gelu(linear(x), "tanh") in fp32 on the same (rounded) inputs: training
// (addmm + GELU, fused GELU/bias backward; rows over several bias chunks, odd widths) and no-grad (the
// cuBLASLt epilogue), and bf16 under autocast from fp32 parameters as the model runs it.
TEST(FusedLinearGeluGpu, MatchesGeluOfLinearInValueAndGradients) {
  struct Case {
    int64_t B, T, in, out;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{1, 3, 5, 7}, Case{3, 7, 37, 101}, Case{2, 300, 768, 3072}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " B=" << c.B << " T=" << c.T << " in=" << c.in
                                        << " out=" << c.out);
      at::manual_seed(c.T + c.in);
      auto x0 = at::randn({c.B, c.T, c.in}, kCuda).to(dt);
      auto w0 = (at::randn({c.out, c.in}, kCuda) / std::sqrt(static_cast<double>(c.in))).to(dt);
      auto b0 = (at::randn({c.out}, kCuda) * 0.5).to(dt);
      auto dy = at::randn({c.B, c.T, c.out}, kCuda).to(dt);
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      auto y = model::fused_linear_gelu(x, w, b);
      ASSERT_TRUE(made_by(y, "FusedLinearGelu"));
      EXPECT_EQ(y.scalar_type(), dt);
      (y * dy).sum().backward();

      auto xr = x0.to(at::kFloat).requires_grad_(true), wr = w0.to(at::kFloat).requires_grad_(true);
      auto br = b0.to(at::kFloat).requires_grad_(true);
      auto yr = at::gelu(at::linear(xr, wr, br), "tanh");
      (yr * dy.to(at::kFloat)).sum().backward();
      const bool fp32 = dt == at::kFloat;
      // bf16: the matmul's output and ∂pre are each rounded once before the next step uses them.
      EXPECT_TRUE(close_scaled(y, yr, fp32 ? 1e-4 : 2e-2, fp32 ? 1e-5 : 1e-2));
      EXPECT_TRUE(close_scaled(x.grad(), xr.grad(), fp32 ? 1e-4 : 2e-2, fp32 ? 1e-5 : 1e-2));
      EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), fp32 ? 1e-4 : 2e-2, fp32 ? 1e-5 : 1e-2));
      EXPECT_TRUE(close_scaled(b.grad(), br.grad(), fp32 ? 1e-4 : 2e-2, fp32 ? 1e-5 : 1e-2));

      // Without gradients: the epilogue path, same values.
      at::NoGradGuard no_grad;
      auto yn = model::fused_linear_gelu(x0, w0, b0);
      EXPECT_FALSE(yn.requires_grad());
      EXPECT_TRUE(close_scaled(yn, yr.detach(), fp32 ? 1e-4 : 2e-2, fp32 ? 1e-5 : 1e-2));
    }
  }
  // Under bf16 autocast from fp32 parameters (the trainer's case): bf16 out, fp32 gradients for fp32 leaves.
  at::manual_seed(3);
  auto x = at::randn({2, 9, 64}, kCuda).requires_grad_(true);
  auto w = (at::randn({96, 64}, kCuda) * 0.125).requires_grad_(true), b = at::randn({96}, kCuda).requires_grad_(true);
  at::Tensor y;
  under_autocast(at::kBFloat16, [&] { y = model::fused_linear_gelu(x, w, b); });
  ASSERT_TRUE(made_by(y, "FusedLinearGelu"));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  auto xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  auto br = b.detach().clone().requires_grad_(true);
  auto yr = at::gelu(at::linear(xr, wr, br), "tanh");
  yr.sum().backward();
  EXPECT_TRUE(close_scaled(y, yr, 2e-2, 1e-2));
  EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), 3e-2, 2e-2));
  EXPECT_TRUE(close_scaled(b.grad(), br.grad(), 3e-2, 2e-2));
}

// The epilogue's GELU is GPT-2's tanh approximation, not the erf one: at ±2.5 and ±3 the two differ by
// about 4·10⁻⁴, far above fp32 rounding. x·I + 0 = x exactly, so y is the activation of the given values.
TEST(FusedLinearGeluGpu, EpilogueIsTheTanhApproximation) {
  auto v = at::tensor({-3.0, -2.5, 2.5, 3.0, -1.5, 1.5, 0.25, -0.25}, kCuda.dtype(at::kFloat));
  auto x = at::zeros({16, 8}, kCuda);
  x.select(1, 0).copy_(v.repeat({2}));
  auto w = at::eye(8, kCuda), b = at::zeros({8}, kCuda);
  at::NoGradGuard no_grad;
  auto y = model::fused_linear_gelu(x, w, b).select(1, 0);
  auto p = x.select(1, 0);
  EXPECT_TRUE(close(y, at::gelu(p, "tanh"), 1e-6, 5e-5));
  EXPECT_GT((y - at::gelu(p)).abs().max().item<double>(), 3e-4);
}

// Each cuBLASLt epilogue (model/kernels/lt_matmul.h) against the composite ops in fp32, computed from the same
// (rounded) inputs. bf16 must run through cuBLASLt at these sizes (rows odd, columns multiples of 8): the
// epilogues are the lever, so a silent fallback fails here. For fp32 the test prints whether cuBLASLt had a
// kernel and checks the values where it ran. Bounds: fp32 within 1e-4 relative plus 1e-5 of the largest
// magnitude (the epilogue's GELU is within 5e-5 of tanh-GELU: 1e-3 / 1e-4 for the GELU ones), bf16 within one
// rounding of each stored output (2e-2 / 1e-2).
TEST(LtMatmulGpu, EachEpilogueMatchesItsCompositeOps) {
  using model::lt::Epilogue;
  struct Case {
    int64_t M, K, N;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{37, 48, 72}, Case{5, 40, 8}, Case{601, 768, 3072}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " M=" << c.M << " K=" << c.K << " N=" << c.N);
      const bool fp32 = dt == at::kFloat;
      at::manual_seed(c.M + c.N);
      const auto f = kCuda.dtype(at::kFloat);
      auto a = at::randn({c.M, c.K}, f).to(dt), b = (at::randn({c.K, c.N}, f) / std::sqrt(c.K)).to(dt);
      auto bias = (at::randn({c.N}, f) * 0.5).to(dt), aux_in = at::randn({c.M, c.N}, f).to(dt);
      const auto ref = at::mm(a.to(at::kFloat), b.to(at::kFloat));  // [M, N]
      auto report = [&](const char* name, bool ran) {
        std::printf("[ lt ] %s %s M=%ld K=%ld N=%ld: %s\n", name, fp32 ? "fp32" : "bf16", static_cast<long>(c.M),
                    static_cast<long>(c.K), static_cast<long>(c.N), ran ? "cuBLASLt" : "no kernel (composite)");
        if (!fp32) {
          EXPECT_TRUE(ran) << name;
        }
        return ran;
      };
      const double rt = fp32 ? 1e-4 : 2e-2, fr = fp32 ? 1e-5 : 1e-2;
      const double rt_gelu = fp32 ? 1e-3 : 2e-2, fr_gelu = fp32 ? 1e-4 : 1e-2;
      {  // plain, and BIAS; b given transposed ([N, K]) as a weight is
        auto out = at::empty({c.M, c.N}, a.options());
        if (report("none", model::lt::run({.a = a, .b = b, .out = out}))) {
          EXPECT_TRUE(close_scaled(out, ref, rt, fr));
        }
        const auto wt = b.t().contiguous();
        if (report("BIAS", model::lt::run({.a = a, .b = wt, .trans_b = true, .out = out, .epilogue = Epilogue::kBias,
                                           .bias = bias}))) {
          EXPECT_TRUE(close_scaled(out, ref + bias.to(at::kFloat), rt, fr));
        }
      }
      {  // GELU_AUX_BIAS: out = gelu(pre), aux = pre
        auto out = at::empty({c.M, c.N}, a.options()), aux = at::empty_like(out);
        if (report("GELU_AUX_BIAS", model::lt::run({.a = a, .b = b, .out = out, .epilogue = Epilogue::kGeluAuxBias,
                                                    .bias = bias, .aux = aux}))) {
          const auto pre = ref + bias.to(at::kFloat);
          EXPECT_TRUE(close_scaled(aux, pre, rt, fr));
          EXPECT_TRUE(close_scaled(out, at::gelu(pre, "tanh"), rt_gelu, fr_gelu));
        }
      }
      {  // DGELU_BGRAD: out = (a·b) ⊙ gelu'(aux), bias = Σ_rows out
        auto out = at::empty({c.M, c.N}, a.options()), db = at::empty({c.N}, a.options());
        if (report("DGELU_BGRAD", model::lt::run({.a = a, .b = b, .out = out, .epilogue = Epilogue::kDGeluBGrad,
                                                  .bias = db, .aux = aux_in}))) {
          const auto dpre = at::gelu_backward(ref, aux_in.to(at::kFloat), "tanh");
          EXPECT_TRUE(close_scaled(out, dpre, rt_gelu, fr_gelu));
          EXPECT_TRUE(close_scaled(db, dpre.sum(0), rt_gelu, fr_gelu));
        }
        if (report("DGELU", model::lt::run({.a = a, .b = b, .out = out, .epilogue = Epilogue::kDGelu,
                                            .aux = aux_in}))) {
          EXPECT_TRUE(close_scaled(out, at::gelu_backward(ref, aux_in.to(at::kFloat), "tanh"), rt_gelu, fr_gelu));
        }
        // DGELU takes no bias: one given is refused, nothing written.
        auto untouched = at::full({c.M, c.N}, 7.0, a.options());
        EXPECT_FALSE(model::lt::run({.a = a, .b = b, .out = untouched, .epilogue = Epilogue::kDGelu, .bias = db,
                                     .aux = aux_in}));
        EXPECT_TRUE(at::all(untouched == 7.0).item<bool>());
      }
      {  // BGRADB: the weight gradient ∂yᵀ·x [N, K] with the bias gradient Σ_rows ∂y [N]; ∂y = a·b here
        auto dy = ref.to(dt), x = at::randn({c.M, c.K}, f).to(dt);
        auto dw = at::empty({c.N, c.K}, a.options()), db = at::empty({c.N}, a.options());
        if (report("BGRADB", model::lt::run({.a = dy, .trans_a = true, .b = x, .out = dw,
                                             .epilogue = Epilogue::kBGradB, .bias = db}))) {
          EXPECT_TRUE(close_scaled(dw, at::mm(dy.to(at::kFloat).t(), x.to(at::kFloat)), rt, fr));
          EXPECT_TRUE(close_scaled(db, dy.to(at::kFloat).sum(0), rt, fr));
        }
      }
    }
  }
}

// bf16 (and fp16) operands with an fp32 output, the weight gradient's GEMM for fp32 master weights: with every
// leading dimension a multiple of 8 (16-byte rows) the plain GEMM must run through cuBLASLt (compute 32F, A/B
// 16-bit, C/D 32F is a combination cuBLASLt supports, and it is what master_linear relies on); with odd ones
// (50) the test prints whether cuBLASLt had a kernel (master_linear falls back to the bf16 GEMM and a cast).
// Where it ran: within fp32 accumulation of the fp32 product of the same rounded operands (1e-4 relative +
// 1e-5 of the largest magnitude; a bf16 store would be off by up to 2⁻⁹ ≈ 2e-3), and not bf16-rounded (some
// element not representable in bf16). BIAS and BGRADB into fp32 are printed and checked where cuBLASLt has a
// kernel (elsewhere their callers fall back).
TEST(LtMatmulGpu, SixteenBitOperandsIntoFp32Output) {
  using model::lt::Epilogue;
  struct Case {
    int64_t M, K, N;
  };
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (Case c : {Case{64, 21, 72}, Case{768, 600, 768}, Case{50, 21, 72}, Case{72, 1000, 50}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " M=" << c.M << " K=" << c.K << " N=" << c.N);
      at::manual_seed(c.M * 3 + c.K);
      const auto f = kCuda.dtype(at::kFloat);
      // As the weight gradient: a = ∂y [K, M] taken transposed, b = x [K, N].
      auto dy = at::randn({c.K, c.M}, f).to(dt), x = at::randn({c.K, c.N}, f).to(dt);
      const auto ref = at::mm(dy.to(at::kFloat).t(), x.to(at::kFloat));
      auto dw = at::empty({c.M, c.N}, f);
      const bool ran = model::lt::run({.a = dy, .trans_a = true, .b = x, .out = dw});
      std::printf("[ lt ] none %s -> fp32 M=%ld K=%ld N=%ld: %s\n", c10::toString(dt), static_cast<long>(c.M),
                  static_cast<long>(c.K), static_cast<long>(c.N), ran ? "cuBLASLt" : "no kernel (composite)");
      if (c.M % 8 == 0 && c.N % 8 == 0) {
        ASSERT_TRUE(ran);
      }
      if (!ran) continue;
      EXPECT_TRUE(close_scaled(dw, ref, 1e-4, 1e-5));
      EXPECT_FALSE(at::equal(dw, dw.to(dt).to(at::kFloat)));  // fp32 values, not 16-bit ones widened

      auto db = at::empty({c.M}, f);
      const bool bgradb = model::lt::run({.a = dy, .trans_a = true, .b = x, .out = dw, .epilogue = Epilogue::kBGradB,
                                          .bias = db});
      std::printf("[ lt ] BGRADB %s -> fp32 M=%ld K=%ld N=%ld: %s\n", c10::toString(dt), static_cast<long>(c.M),
                  static_cast<long>(c.K), static_cast<long>(c.N), bgradb ? "cuBLASLt" : "no kernel (composite)");
      if (bgradb) {
        EXPECT_TRUE(close_scaled(dw, ref, 1e-4, 1e-5));
        EXPECT_TRUE(close_scaled(db, dy.to(at::kFloat).sum(0), 1e-4, 1e-5));
      }
      auto bias = at::randn({c.N}, f);
      auto a = dy.t().contiguous();  // [M, K]
      auto w = x.t().contiguous();   // [N, K], as a weight
      auto y = at::empty({c.M, c.N}, f);
      const bool biased =
          model::lt::run({.a = a, .b = w, .trans_b = true, .out = y, .epilogue = Epilogue::kBias, .bias = bias});
      std::printf("[ lt ] BIAS %s -> fp32: %s\n", c10::toString(dt), biased ? "cuBLASLt" : "no kernel (composite)");
      if (biased) {
        EXPECT_TRUE(close_scaled(y, ref + bias, 1e-4, 1e-5));
      }
    }
  }
}

// c: out = c + op(a)·op(b) (+ bias), c apart from out and c = out (out +=), in bf16 and into fp32 from bf16
// operands (the residual added to a projection). Against the composite in fp32 of the same rounded operands; a
// bf16 out within bf16 roundings of the sum. Then the same with tuning on (the heuristic's answers timed, the
// fastest kept): the same values, and out added into once (the timing writes a scratch matrix, not out).
TEST(LtMatmulGpu, AddsCIntoOutAndTuningKeepsTheResult) {
  using model::lt::Epilogue;
  const auto f = kCuda.dtype(at::kFloat);
  for (bool tune : {false, true}) {
    model::lt::set_tuning(tune);
    for (auto out_dt : {at::kBFloat16, at::kFloat}) {
      SCOPED_TRACE(::testing::Message() << "tuning " << tune << " out " << c10::toString(out_dt));
      at::manual_seed(7);
      auto a = at::randn({96, 256}, f).to(at::kBFloat16), w = at::randn({136, 256}, f).to(at::kBFloat16);
      auto start = at::randn({96, 136}, f).to(out_dt), bias = at::randn({136}, f).to(out_dt);
      const auto prod = at::mm(a.to(at::kFloat), w.to(at::kFloat).t());
      const double rel = out_dt == at::kFloat ? 1e-4 : 2e-2;
      auto out = at::empty_like(start);
      ASSERT_TRUE(model::lt::run({.a = a, .b = w, .trans_b = true, .out = out, .c = start}));
      EXPECT_TRUE(close_scaled(out, start.to(at::kFloat) + prod, rel, rel / 10));
      out = start.clone();
      ASSERT_TRUE(model::lt::run({.a = a, .b = w, .trans_b = true, .out = out, .c = out}));
      EXPECT_TRUE(close_scaled(out, start.to(at::kFloat) + prod, rel, rel / 10));
      out = start.clone();
      const bool biased = model::lt::run(
          {.a = a, .b = w, .trans_b = true, .out = out, .epilogue = Epilogue::kBias, .bias = bias, .c = out});
      std::printf("[ lt ] BIAS + c -> %s: %s\n", c10::toString(out_dt), biased ? "cuBLASLt" : "no kernel");
      if (biased) {
        EXPECT_TRUE(close_scaled(out, start.to(at::kFloat) + prod + bias.to(at::kFloat), rel, rel / 10));
      }
      // Epilogues that write more than out take no c; nor does a c of another shape or dtype.
      auto db = at::empty({96}, kCuda.dtype(out_dt));
      EXPECT_FALSE(model::lt::run({.a = a, .b = w, .trans_b = true, .out = out, .epilogue = Epilogue::kBGradB,
                                   .bias = db, .c = out}));
      EXPECT_FALSE(model::lt::run({.a = a, .b = w, .trans_b = true, .out = out, .c = start.narrow(1, 0, 8)}));
    }
  }
  model::lt::set_tuning(false);
}

// The column sum (model/kernels/column_sum.h) against at::sum in fp64 of the same values: fp32, bf16 and fp16 input,
// fp32 and 16-bit output, rows 1 (one partial), 7, 1000 (several chunks, the last one short) and 32768 (GPT-2's
// tokens per micro-batch), widths that take the 16-byte vector path (768, 72 for 16-bit) and the scalar one (50,
// 3, and a pointer one element past an aligned address). Bound: fp32 summation in at most 64 sequential steps
// per element (32 per lane, 8 lanes, 16 partials per lane, 8 lanes), so |error| ≤ 64·2⁻²⁴·Σ|x| < 1e-5·Σ|x| per
// column; a 16-bit output adds its one rounding (2⁻⁸ relative for bf16, 2⁻¹¹ for fp16).
TEST(ColumnSumGpu, MatchesSumInEachDtype) {
  for (auto in_dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t rows : {1, 7, 1000, 32768}) {
      for (int64_t cols : {768, 72, 50, 3}) {
        for (int64_t offset : {0, 1}) {
          if (offset == 1 && rows == 32768) continue;  // the misaligned path once per dtype and size is enough
          SCOPED_TRACE(::testing::Message() << c10::toString(in_dt) << " rows=" << rows << " cols=" << cols
                                            << " offset=" << offset);
          at::manual_seed(rows + cols + offset);
          const int64_t n = rows * cols;
          auto x = (at::randn({n + offset}, kCuda) + 0.25).to(in_dt).narrow(0, offset, n).view({rows, cols});
          const auto xd = x.to(at::kDouble);
          const auto ref = xd.sum(0), abs_sum = xd.abs().sum(0);
          for (auto out_dt : {at::kFloat, in_dt}) {
            auto s = model::column_sum(x, out_dt);
            EXPECT_EQ(s.scalar_type(), out_dt);
            ASSERT_EQ(s.sizes(), (std::vector<int64_t>{cols}));
            const double rel = out_dt == at::kBFloat16 ? 1.0 / 256 : out_dt == at::kHalf ? 1.0 / 2048 : 0.0;
            const auto excess = (s.to(at::kDouble) - ref).abs() - (1e-5 * abs_sum + rel * ref.abs());
            EXPECT_LE(excess.max().item<double>(), 0.0) << c10::toString(out_dt);
          }
        }
      }
    }
  }
  // No rows: zeros; a non-contiguous input is summed as its values.
  EXPECT_EQ(model::column_sum(at::empty({0, 5}, kCuda), at::kFloat).abs().max().item<float>(), 0.f);
  auto t = at::randn({40, 30}, kCuda);
  EXPECT_TRUE(close(model::column_sum(t.t(), at::kFloat), t.t().sum(0), 1e-5, 1e-5));
}

// What cuBLASLt refuses, run() refuses without writing: the GELU input's leading dimension not a multiple of 8,
// mismatched shapes or dtypes, an empty reduction. A pointer misaligned by one element is passed to the
// algorithm search, which either finds a kernel that takes it (and the result is right) or none.
TEST(LtMatmulGpu, RefusesWhatItCannotRunAndHandlesMisalignedPointers) {
  using model::lt::Epilogue;
  const auto bf = kCuda.dtype(at::kBFloat16);
  auto a = at::randn({9, 16}, bf), b = at::randn({16, 30}, bf), bias = at::randn({30}, bf);
  auto out = at::full({9, 30}, 7.0, bf), aux = at::empty_like(out);
  EXPECT_FALSE(
      model::lt::run({.a = a, .b = b, .out = out, .epilogue = Epilogue::kGeluAuxBias, .bias = bias, .aux = aux}));
  EXPECT_TRUE(at::all(out == 7.0).item<bool>());  // nothing written
  EXPECT_FALSE(
      model::lt::run({.a = a, .b = b, .out = out, .epilogue = Epilogue::kBias, .bias = bias.narrow(0, 0, 29)}));
  EXPECT_FALSE(model::lt::run({.a = a.to(at::kFloat), .b = b, .out = out}));
  // out wider than the inputs only as fp32 from 16-bit a and b; never narrower, never another 16-bit type.
  EXPECT_FALSE(model::lt::run({.a = a.to(at::kFloat), .b = b.to(at::kFloat), .out = out}));
  EXPECT_FALSE(model::lt::run({.a = a, .b = b, .out = at::empty({9, 30}, kCuda.dtype(at::kHalf))}));
  // The bias in out's dtype: fp32 out with a bf16 bias is refused.
  EXPECT_FALSE(model::lt::run({.a = a, .b = b, .out = at::empty({9, 30}, kCuda), .epilogue = Epilogue::kBias,
                               .bias = bias}));
  EXPECT_FALSE(model::lt::run({.a = at::empty({9, 0}, bf), .b = at::empty({0, 30}, bf), .out = out}));
  // a, b and out one bf16 element (2 bytes) past an aligned address.
  auto shifted = [&](at::IntArrayRef shape) {
    const int64_t n = c10::multiply_integers(shape);
    return at::empty({n + 1}, bf).narrow(0, 1, n).view(shape);
  };
  auto a1 = shifted({9, 16}), b1 = shifted({16, 32}), out1 = shifted({9, 32});
  a1.copy_(a);
  b1.copy_(at::randn({16, 32}, bf));
  const bool ran = model::lt::run({.a = a1, .b = b1, .out = out1});
  std::printf("[ lt ] misaligned bf16 pointers: %s\n", ran ? "cuBLASLt" : "no kernel (composite)");
  if (ran) {
    EXPECT_TRUE(close_scaled(out1, at::mm(a1.to(at::kFloat), b1.to(at::kFloat)), 2e-2, 1e-2));
  }
}

// The biased linear (BIAS forward, BGRADB in the weight-gradient GEMM) against at::linear in fp32 on the same
// rounded inputs: odd rows, widths that are multiples of nothing and GPT-2's, all three gradients and the bias
// gradient alone (frozen weight); bf16 under autocast from fp32 parameters as the trainer runs it.
TEST(BiasLinearGpu, MatchesLinearInValueAndGradients) {
  struct Case {
    int64_t B, T, in, out;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{1, 3, 5, 7}, Case{3, 7, 37, 101}, Case{3, 7, 40, 96}, Case{2, 300, 768, 2304}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " B=" << c.B << " T=" << c.T << " in=" << c.in
                                        << " out=" << c.out);
      at::manual_seed(c.T + c.out);
      auto x0 = at::randn({c.B, c.T, c.in}, kCuda).to(dt);
      auto w0 = (at::randn({c.out, c.in}, kCuda) / std::sqrt(static_cast<double>(c.in))).to(dt);
      auto b0 = (at::randn({c.out}, kCuda) * 0.5).to(dt);
      auto dy = at::randn({c.B, c.T, c.out}, kCuda).to(dt);
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto b = b0.clone().requires_grad_(true);
      auto y = model::bias_linear(x, w, b);
      ASSERT_TRUE(made_by(y, "LtBiasLinear"));
      EXPECT_EQ(y.scalar_type(), dt);
      (y * dy).sum().backward();
      auto xr = x0.to(at::kFloat).requires_grad_(true), wr = w0.to(at::kFloat).requires_grad_(true);
      auto br = b0.to(at::kFloat).requires_grad_(true);
      auto yr = at::linear(xr, wr, br);
      (yr * dy.to(at::kFloat)).sum().backward();
      const bool fp32 = dt == at::kFloat;
      const double rt = fp32 ? 1e-4 : 2e-2, fr = fp32 ? 1e-5 : 1e-2;
      EXPECT_TRUE(close_scaled(y, yr, rt, fr));
      EXPECT_TRUE(close_scaled(x.grad(), xr.grad(), rt, fr));
      EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), rt, fr));
      EXPECT_TRUE(close_scaled(b.grad(), br.grad(), rt, fr));
      // The bias alone trains (weight frozen, input a constant): its gradient still right.
      // detach(): under fp32 the references above alias x0, w0 and b0 (to() of the same dtype is a no-op).
      auto b2 = b0.detach().clone().requires_grad_(true);
      (model::bias_linear(x0.detach(), w0.detach(), b2) * dy).sum().backward();
      EXPECT_TRUE(close_scaled(b2.grad(), br.grad(), rt, fr));
    }
  }
  at::manual_seed(3);
  auto x = at::randn({2, 9, 64}, kCuda).requires_grad_(true);
  auto w = (at::randn({96, 64}, kCuda) * 0.125).requires_grad_(true), b = at::randn({96}, kCuda).requires_grad_(true);
  at::Tensor y;
  under_autocast(at::kBFloat16, [&] { y = model::bias_linear(x, w, b); });
  ASSERT_TRUE(made_by(y, "LtBiasLinear"));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(b.grad().scalar_type(), at::kFloat);
  auto xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  auto br = b.detach().clone().requires_grad_(true);
  at::linear(xr, wr, br).sum().backward();
  EXPECT_TRUE(close_scaled(w.grad(), wr.grad(), 3e-2, 2e-2));
  EXPECT_TRUE(close_scaled(b.grad(), br.grad(), 3e-2, 2e-2));
  EXPECT_TRUE(close_scaled(x.grad(), xr.grad(), 3e-2, 2e-2));
}

// The linear on fp32 master weights under autocast (model/linear/master_linear.h) against at::linear under the same
// autocast (the composite: bf16 GEMMs, ∂W rounded to bf16 and widened by the cast backward) and against the
// fp32 reference computed from the same bf16-rounded operands (x, W, b and ∂y rounded as the GEMMs see them).
// Bounds: y and ∂x are bf16 GEMMs either way (one rounding: 1e-2 relative + 1e-2 of the largest magnitude);
// ∂W is fp32 and within that bf16-scale bound of the reference — from cuBLASLt's fp32-output GEMM it is more
// exact than the composite's bf16-rounded one, and at GPT-2's aligned 768 × 768 (where cuBLASLt must run it,
// LtMatmulGpu.SixteenBitOperandsIntoFp32Output) it is checked to be fp32-exact (1e-4 + 1e-4) and not
// bf16-representable everywhere; with out = 50 (rows of 100 bytes) cuBLASLt may decline and the bf16 GEMM +
// cast stands in. ∂b is the column sum in fp32 (1e-4 + 1e-5). Odd sizes: rows not a multiple of 8 (3, 21),
// out = 50, in = 72; GPT-2's 768. bf16 and fp16 autocast, with and without bias, x fp32 (its gradient through
// autocast's cast) or 16-bit.
TEST(MasterLinearGpu, MatchesAutocastLinearWithFp32Gradients) {
  struct Case {
    int64_t B, T, in, out;
  };
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (Case c : {Case{1, 3, 72, 50}, Case{3, 7, 72, 50}, Case{2, 300, 768, 768}}) {
      for (bool with_bias : {true, false}) {
        for (bool x_fp32 : {true, false}) {
          SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " B=" << c.B << " T=" << c.T << " in=" << c.in
                                            << " out=" << c.out << " bias=" << with_bias << " x_fp32=" << x_fp32);
          at::manual_seed(c.T + c.out + with_bias);
          const auto f = kCuda.dtype(at::kFloat);
          auto x0 = at::randn({c.B, c.T, c.in}, f).to(x_fp32 ? at::kFloat : dt);
          auto w0 = at::randn({c.out, c.in}, f) / std::sqrt(static_cast<double>(c.in));
          auto b0 = with_bias ? at::randn({c.out}, f) * 0.5 : at::Tensor();
          auto dy = at::randn({c.B, c.T, c.out}, f).to(dt);
          auto leaf = [](const at::Tensor& t) { return t.defined() ? t.clone().requires_grad_(true) : t; };
          auto x = leaf(x0), w = leaf(w0), b = leaf(b0);
          auto xc = leaf(x0), wc = leaf(w0), bc = leaf(b0);  // the composite's
          at::Tensor y, yc;
          under_autocast(dt, [&] {
            ASSERT_TRUE(model::master_linear_applies(x, w, b));
            y = model::master_linear(x, w, b);
            yc = at::linear(xc, wc, bc);
          });
          ASSERT_TRUE(made_by(y, "MasterLinear"));
          EXPECT_EQ(y.scalar_type(), dt);
          (y * dy).sum().backward();
          (yc * dy).sum().backward();
          EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
          EXPECT_EQ(x.grad().scalar_type(), x0.scalar_type());

          // The fp32 reference on the operands as the GEMMs see them.
          const auto rounded = [&](const at::Tensor& t) { return t.to(dt).to(at::kFloat); };
          auto xr = rounded(x0).reshape({-1, c.in}), wr = rounded(w0), dyr = dy.to(at::kFloat).reshape({-1, c.out});
          auto yr = at::mm(xr, wr.t());
          if (with_bias) yr = yr + rounded(b0);
          EXPECT_TRUE(close_scaled(y.reshape({-1, c.out}), yr, 1e-2, 1e-2));
          EXPECT_TRUE(close_scaled(y, yc, 1e-2, 1e-2));
          EXPECT_TRUE(close_scaled(x.grad().reshape({-1, c.in}), at::mm(dyr, wr), 1e-2, 1e-2));
          EXPECT_TRUE(close_scaled(x.grad(), xc.grad(), 1e-2, 1e-2));
          const auto dw_ref = at::mm(dyr.t(), xr);
          EXPECT_TRUE(close_scaled(w.grad(), dw_ref, 1e-2, 1e-2));
          EXPECT_TRUE(close_scaled(wc.grad(), dw_ref, 1e-2, 1e-2));  // the composite: one bf16 rounding off
          if (c.out % 8 == 0 && c.in % 8 == 0) {
            EXPECT_TRUE(close_scaled(w.grad(), dw_ref, 1e-4, 1e-4));
            EXPECT_FALSE(at::equal(w.grad(), w.grad().to(dt).to(at::kFloat)));
          }
          if (with_bias) {
            EXPECT_EQ(b.grad().scalar_type(), at::kFloat);
            EXPECT_TRUE(close_scaled(b.grad(), dyr.sum(0), 1e-4, 1e-5));
            EXPECT_TRUE(close_scaled(bc.grad(), dyr.sum(0), 1e-2, 1e-2));
          }
        }
      }
    }
  }
}

// residual_linear (r + x·Wᵀ + b, the add in the GEMM's C) against the composite r + at::linear under autocast:
// the fp32 sum and every gradient (∂r = ∂y, ∂W and ∂b in fp32), with and without a bias, odd sizes included;
// against the fp32 reference on the rounded operands within bf16 accumulation.
TEST(ResidualLinearGpu, MatchesResidualPlusLinearInValueAndGradients) {
  struct Case {
    int64_t B, T, in, out;
  };
  for (Case c : {Case{1, 3, 72, 48}, Case{2, 5, 72, 50}, Case{2, 300, 3072, 768}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " in=" << c.in << " out=" << c.out
                                        << " bias=" << with_bias);
      at::manual_seed(c.T + c.in + with_bias);
      const auto f = kCuda.dtype(at::kFloat);
      const auto dt = at::kBFloat16;
      auto x0 = at::randn({c.B, c.T, c.in}, f).to(dt);
      auto w0 = at::randn({c.out, c.in}, f) / std::sqrt(static_cast<double>(c.in));
      auto b0 = with_bias ? at::randn({c.out}, f) * 0.5 : at::Tensor();
      auto r0 = at::randn({c.B, c.T, c.out}, f) * 4;
      auto dy = at::randn({c.B, c.T, c.out}, f);
      auto leaf = [](const at::Tensor& t) { return t.defined() ? t.clone().requires_grad_(true) : t; };
      auto x = leaf(x0), w = leaf(w0), b = leaf(b0), r = leaf(r0);
      auto xc = leaf(x0), wc = leaf(w0), bc = leaf(b0), rc = leaf(r0);
      at::Tensor y, yc;
      under_autocast(dt, [&] {
        ASSERT_TRUE(model::residual_linear_applies(x, w, b, r));
        y = model::residual_linear(x, w, b, r);
        yc = rc + at::linear(xc, wc, bc);
      });
      ASSERT_TRUE(made_by(y, "ResidualLinear"));
      EXPECT_EQ(y.scalar_type(), at::kFloat);
      (y * dy).sum().backward();
      (yc * dy).sum().backward();
      const auto rounded = [&](const at::Tensor& t) { return t.to(dt).to(at::kFloat); };
      auto xr = x0.to(at::kFloat).reshape({-1, c.in}), wr = rounded(w0);
      auto yr = at::mm(xr, wr.t()) + r0.reshape({-1, c.out});
      if (with_bias) yr = yr + b0;  // the fp32 bias, added in fp32 (the composite adds its bf16 copy)
      EXPECT_TRUE(close_scaled(y.reshape({-1, c.out}), yr, 1e-4, 1e-4));
      EXPECT_TRUE(close_scaled(y, yc, 1e-2, 1e-2));
      EXPECT_TRUE(at::equal(r.grad(), dy));
      EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
      const auto dyr = rounded(dy).reshape({-1, c.out});
      EXPECT_TRUE(close_scaled(w.grad(), at::mm(dyr.t(), xr), 1e-4, 1e-4));
      EXPECT_TRUE(close_scaled(x.grad(), xc.grad(), 1e-2, 1e-2));
      EXPECT_TRUE(close_scaled(w.grad(), wc.grad(), 1e-2, 1e-2));
      if (with_bias) {
        EXPECT_EQ(b.grad().scalar_type(), at::kFloat);
        EXPECT_TRUE(close_scaled(b.grad(), dyr.sum(0), 1e-4, 1e-5));
      }
    }
  }
  // Where it does not apply: the composite (no autocast; a bf16 residual).
  auto x = at::randn({2, 3, 8}, kCuda.dtype(at::kFloat)), w = at::randn({16, 8}, kCuda.dtype(at::kFloat));
  auto r = at::randn({2, 3, 16}, kCuda.dtype(at::kFloat));
  EXPECT_FALSE(model::residual_linear_applies(x, w, at::Tensor(), r));
  EXPECT_TRUE(at::allclose(model::residual_linear(x, w, at::Tensor(), r), r + at::linear(x, w)));
  under_autocast(at::kBFloat16, [&] {
    EXPECT_FALSE(model::residual_linear_applies(x, w.requires_grad_(true), at::Tensor(), r.to(at::kBFloat16)));
  });
}

// forward_shared_input (q/k/v, gate/up sharing x) against each layer's own forward: the same outputs, and the
// same gradients — ∂x summed by the GEMMs — within bf16 accumulation; layers with biases (GPT-2), without
// (Llama), GQA-sized k/v; one output unused (no gradient reaches its weight). A layer that cannot take part (no master
// gradients) sends the whole group down the per-layer path.
TEST(SharedInputLinearsGpu, MatchesSeparateLinearsInValueAndGradients) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias=" << with_bias);
    at::manual_seed(21 + with_bias);
    const auto f = kCuda.dtype(at::kFloat);
    std::vector<model::Linear> fused, plain;
    for (int64_t out : {96, 32, 32}) {
      fused.emplace_back(64, out, with_bias, f);
      plain.emplace_back(64, out, with_bias, f);
    }
    for (size_t i = 0; i < fused.size(); ++i) {
      at::NoGradGuard ng;
      fused[i]->weight.normal_(0, 0.1);
      plain[i]->weight.copy_(fused[i]->weight);
      if (with_bias) {
        fused[i]->bias.normal_();
        plain[i]->bias.copy_(fused[i]->bias);
      }
      fused[i]->set_master_grads(true);
      fused[i]->set_fused_adds(true);
    }
    auto x0 = at::randn({3, 40, 64}, f);
    auto x = x0.clone().requires_grad_(true), xp = x0.clone().requires_grad_(true);
    std::vector<at::Tensor> ys, yp;
    under_autocast(at::kBFloat16, [&] {
      ASSERT_TRUE(model::shares_input({fused[0].get(), fused[1].get(), fused[2].get()}, x));
      ys = model::forward_shared_input({fused[0].get(), fused[1].get(), fused[2].get()}, x);
      for (auto& l : plain) yp.push_back(l->forward(xp));
    });
    ASSERT_TRUE(made_by(ys[0], "SharedInputLinears"));
    at::Tensor loss = at::zeros({}, f), loss_p = at::zeros({}, f);
    for (size_t i = 0; i < 2; ++i) {  // the third output unused
      EXPECT_TRUE(close_scaled(ys[i], yp[i], 1e-2, 1e-2));
      auto dy = at::randn(ys[i].sizes(), f);
      loss = loss + (ys[i].to(at::kFloat) * dy).sum();
      loss_p = loss_p + (yp[i].to(at::kFloat) * dy).sum();
    }
    loss.backward();
    loss_p.backward();
    EXPECT_TRUE(close_scaled(x.grad(), xp.grad(), 1e-2, 1e-2));
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(fused[i]->weight.grad().scalar_type(), at::kFloat);
      EXPECT_TRUE(close_scaled(fused[i]->weight.grad(), plain[i]->weight.grad(), 1e-2, 1e-2));
      if (with_bias) {
        EXPECT_TRUE(close_scaled(fused[i]->bias.grad(), plain[i]->bias.grad(), 1e-2, 1e-2));
      }
    }
    EXPECT_FALSE(fused[2]->weight.grad().defined() && fused[2]->weight.grad().abs().sum().item<double>() > 0);
    fused[1]->set_master_grads(false);
    under_autocast(at::kBFloat16, [&] {
      EXPECT_FALSE(model::shares_input({fused[0].get(), fused[1].get(), fused[2].get()}, x));
      auto y2 = model::forward_shared_input({fused[0].get(), fused[1].get(), fused[2].get()}, x);
      EXPECT_FALSE(made_by(y2[0], "SharedInputLinears"));
    });
  }
}

// Where master_linear does not apply it is at::linear, value for value: no autocast (fp32), no gradient to
// build, the weight already bf16 (FSDP's param_dtype). A frozen weight (LoRA's base) still takes the function
// when x needs a gradient, and gets none; a frozen weight with a trained bias gets only the bias's.
TEST(MasterLinearGpu, FallsBackToLinearAndRespectsFrozenWeights) {
  at::manual_seed(11);
  const auto f = kCuda.dtype(at::kFloat);
  auto x0 = at::randn({3, 7, 72}, f), w0 = at::randn({50, 72}, f) * 0.1, b0 = at::randn({50}, f);
  {  // no autocast: fp32 at::linear
    auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    EXPECT_FALSE(model::master_linear_applies(x, w, b0));
    auto y = model::master_linear(x, w, b0);
    EXPECT_FALSE(made_by(y, "MasterLinear"));
    EXPECT_TRUE(at::equal(y, at::linear(x, w, b0)));
  }
  under_autocast(at::kBFloat16, [&] {
    at::Tensor y;
    {  // nothing needs a gradient
      EXPECT_FALSE(model::master_linear_applies(x0, w0, b0));
      y = model::master_linear(x0, w0, b0);
      EXPECT_FALSE(y.requires_grad());
      EXPECT_TRUE(at::equal(y, at::linear(x0, w0, b0)));
    }
    {  // a bf16 weight: ∂W is bf16 either way
      auto wb = w0.to(at::kBFloat16).requires_grad_(true);
      EXPECT_FALSE(model::master_linear_applies(x0, wb, at::Tensor()));
      y = model::master_linear(x0, wb, at::Tensor());
      EXPECT_FALSE(made_by(y, "MasterLinear"));
    }
    {  // frozen weight and bias, x trained
      auto x = x0.clone().requires_grad_(true);
      y = model::master_linear(x, w0, b0);
      ASSERT_TRUE(made_by(y, "MasterLinear"));
      y.sum().backward();
      EXPECT_EQ(x.grad().scalar_type(), at::kFloat);
      auto xr = x0.clone().requires_grad_(true);
      at::linear(xr, w0, b0).sum().backward();
      EXPECT_TRUE(close_scaled(x.grad(), xr.grad(), 1e-2, 1e-2));
    }
    {  // frozen weight, trained bias, constant x
      auto b = b0.clone().requires_grad_(true);
      auto dy = at::randn({3, 7, 50}, kCuda).to(at::kBFloat16);
      y = model::master_linear(x0, w0, b);
      ASSERT_TRUE(made_by(y, "MasterLinear"));
      (y * dy).sum().backward();
      EXPECT_FALSE(w0.grad().defined());
      EXPECT_TRUE(close_scaled(b.grad(), dy.to(at::kFloat).sum(at::IntArrayRef{0, 1}), 1e-4, 1e-5));
    }
  });
}

// The trainer's uses: a model::Linear with master_grads on takes the function under autocast; two micro-batches
// accumulate fp32 into the fp32 .grad (the sum of the two single gradients); under activation checkpointing
// (forward without gradients, recomputed under the saved autocast state in backward) the gradients equal the
// plain run's.
TEST(MasterLinearGpu, LinearLayerAccumulationAndCheckpointing) {
  at::manual_seed(12);
  model::Linear lin(72, 50, /*bias=*/true, kCuda.dtype(at::kFloat));
  {
    at::NoGradGuard init;
    lin->weight.normal_(0, 0.1);
    lin->bias.normal_(0, 0.1);
  }
  lin->set_master_grads(true);
  auto x1 = at::randn({2, 21, 72}, kCuda).requires_grad_(true), x2 = at::randn({2, 21, 72}, kCuda);
  auto grads = [&] { return std::vector<at::Tensor>{lin->weight.grad().clone(), lin->bias.grad().clone()}; };
  auto zero = [&] {
    lin->weight.mutable_grad() = at::Tensor();
    lin->bias.mutable_grad() = at::Tensor();
  };
  at::Tensor y;
  under_autocast(at::kBFloat16, [&] { y = lin->forward(x1); });
  ASSERT_TRUE(made_by(y, "MasterLinear"));
  y.to(at::kFloat).square().sum().backward();
  const auto g1 = grads();
  zero();
  under_autocast(at::kBFloat16, [&] { y = lin->forward(x2); });
  y.to(at::kFloat).square().sum().backward();
  const auto g2 = grads();
  under_autocast(at::kBFloat16, [&] { y = lin->forward(x1); });  // accumulates onto g2
  y.to(at::kFloat).square().sum().backward();
  EXPECT_EQ(lin->weight.grad().scalar_type(), at::kFloat);
  EXPECT_TRUE(close(lin->weight.grad(), g1[0] + g2[0], 1e-6, 1e-6));
  EXPECT_TRUE(close(lin->bias.grad(), g1[1] + g2[1], 1e-6, 1e-6));

  zero();
  const model::BlockFn run = [&](const at::Tensor& in) { return lin->forward(in); };
  under_autocast(at::kBFloat16, [&] { y = model::checkpointed(run, x1, {lin->weight, lin->bias}); });
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.to(at::kFloat).square().sum().backward();
  EXPECT_EQ(lin->weight.grad().scalar_type(), at::kFloat);
  // The checkpointed forward ran at::linear (no gradients then), the recomputation the function: the same
  // bf16 GEMMs, so at most a rounding apart.
  EXPECT_TRUE(close_scaled(lin->weight.grad(), g1[0], 1e-3, 1e-4));
  EXPECT_TRUE(close_scaled(lin->bias.grad(), g1[1], 1e-3, 1e-4));
}

// GPT-2's MLP as one function (GELU_AUX_BIAS, BIAS, DGELU, column-sum bias gradients) against linear → gelu →
// linear in fp32 on the same rounded inputs: odd rows, d_ff a multiple of 8 (the epilogues) and not (fc's fall
// back to the composite ops inside the function), GPT-2's widths; all five gradients, the no-grad path, and bf16
// under autocast from fp32 parameters. Bounds: fp32 1e-3 relative + 1e-4 of the largest magnitude (the
// epilogue's GELU is within 5e-5 of tanh-GELU), bf16 3e-2 + 2e-2 (two stored roundings, pre and h, before a GEMM).
TEST(GeluMlpGpu, MatchesLinearGeluLinearInValueAndGradients) {
  struct Case {
    int64_t B, T, D, F;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (Case c : {Case{1, 3, 8, 16}, Case{3, 7, 37, 104}, Case{3, 7, 40, 100}, Case{2, 300, 768, 3072}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " B=" << c.B << " T=" << c.T << " D=" << c.D
                                        << " F=" << c.F);
      at::manual_seed(c.T + c.F);
      const auto f = kCuda.dtype(at::kFloat);
      std::vector<at::Tensor> p0 = {at::randn({c.B, c.T, c.D}, f), at::randn({c.F, c.D}, f) / std::sqrt(c.D),
                                    at::randn({c.F}, f) * 0.5, at::randn({c.D, c.F}, f) / std::sqrt(c.F),
                                    at::randn({c.D}, f) * 0.5};
      for (auto& t : p0) t = t.to(dt);
      auto dy = at::randn({c.B, c.T, c.D}, f).to(dt);
      std::vector<at::Tensor> p, pr;
      for (const auto& t : p0) {
        p.push_back(t.clone().requires_grad_(true));
        pr.push_back(t.to(at::kFloat).requires_grad_(true));
      }
      auto y = model::gelu_mlp(p[0], p[1], p[2], p[3], p[4]);
      ASSERT_TRUE(made_by(y, "LtGeluMlp"));
      EXPECT_EQ(y.scalar_type(), dt);
      (y * dy).sum().backward();
      auto yr = at::linear(at::gelu(at::linear(pr[0], pr[1], pr[2]), "tanh"), pr[3], pr[4]);
      (yr * dy.to(at::kFloat)).sum().backward();
      const bool fp32 = dt == at::kFloat;
      const double rt = fp32 ? 1e-3 : 3e-2, fr = fp32 ? 1e-4 : 2e-2;
      EXPECT_TRUE(close_scaled(y, yr, rt, fr));
      const char* names[] = {"x", "w_fc", "b_fc", "w_proj", "b_proj"};
      for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(close_scaled(p[i].grad(), pr[i].grad(), rt, fr)) << names[i];

      at::NoGradGuard no_grad;
      auto yn = model::gelu_mlp(p0[0], p0[1], p0[2], p0[3], p0[4]);
      EXPECT_FALSE(yn.requires_grad());
      EXPECT_TRUE(close_scaled(yn, yr.detach(), rt, fr));
    }
  }
  at::manual_seed(3);
  const auto f = kCuda.dtype(at::kFloat);
  std::vector<at::Tensor> p = {at::randn({2, 9, 64}, f), at::randn({256, 64}, f) * 0.125, at::randn({256}, f),
                               at::randn({64, 256}, f) * 0.0625, at::randn({64}, f)};
  std::vector<at::Tensor> pr;
  for (auto& t : p) {
    t.requires_grad_(true);
    pr.push_back(t.detach().clone().requires_grad_(true));
  }
  at::Tensor y;
  under_autocast(at::kBFloat16, [&] { y = model::gelu_mlp(p[0], p[1], p[2], p[3], p[4]); });
  ASSERT_TRUE(made_by(y, "LtGeluMlp"));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.sum().backward();
  at::linear(at::gelu(at::linear(pr[0], pr[1], pr[2]), "tanh"), pr[3], pr[4]).sum().backward();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].grad().scalar_type(), at::kFloat) << i;
    EXPECT_TRUE(close_scaled(p[i].grad(), pr[i].grad(), 3e-2, 2e-2)) << i;
  }
  // With the block's fp32 residual r: added in proj's GEMM, the output fp32, ∂r = ∂y.
  auto r = at::randn({2, 9, 64}, f).requires_grad_(true);
  auto rr = r.detach().clone().requires_grad_(true);
  for (size_t i = 0; i < p.size(); ++i) p[i].mutable_grad() = pr[i].mutable_grad() = at::Tensor();
  under_autocast(at::kBFloat16, [&] { y = model::gelu_mlp(p[0], p[1], p[2], p[3], p[4], r); });
  ASSERT_TRUE(made_by(y, "LtGeluMlp"));
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  const auto dy = at::randn({2, 9, 64}, f);
  (y * dy).sum().backward();
  auto yr = rr + at::linear(at::gelu(at::linear(pr[0], pr[1], pr[2]), "tanh"), pr[3], pr[4]);
  (yr * dy).sum().backward();
  EXPECT_TRUE(close_scaled(y, yr, 3e-2, 2e-2));
  EXPECT_TRUE(at::equal(r.grad(), dy));
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(close_scaled(p[i].grad(), pr[i].grad(), 3e-2, 2e-2)) << i;
}

// The whole model under bf16 autocast, as the trainer runs it: fused on and off give the same loss within
// bf16 noise and gradients whose difference is small next to their norm.
TEST(FusedModelGpu, SwitchGivesTheSameLossAndGradientsUnderBf16Autocast) {
  for (const char* family : {"llama", "gpt2"}) {
    SCOPED_TRACE(family);
    ModelConfig m;
    m.family = parse_enum<Family>(family, "family");
    m.vocab_size = 1001;
    m.n_layer = 2;
    m.n_head = 4;
    m.n_kv_head = std::string(family) == "llama" ? 2 : 4;
    m.d_model = 64;
    m.d_ff = 176;
    m.max_seq_len = 64;
    m.rope_theta = 500000;
    at::manual_seed(4);
    auto tokens = at::randint(0, m.vocab_size, {3, 61}, kCuda.dtype(at::kLong));
    auto targets = at::randint(0, m.vocab_size, {3, 61}, kCuda.dtype(at::kLong));
    // The composite run first; then all kernels, each lever of its own switched off, and the epilogues off.
    struct Levers {
      bool kernels, norm, gelu, epilogues;
    };
    std::vector<double> losses;
    std::vector<at::Tensor> grads;
    for (Levers l : {Levers{false, true, true, true}, Levers{true, true, true, true}, Levers{true, false, true, true},
                     Levers{true, true, false, false}, Levers{true, true, true, false}}) {
      model::Transformer net(m);
      net->init_weights(5);
      net->to(at::kCUDA);
      net->set_fused_norm(l.norm);
      net->set_fused_gelu(l.gelu);
      net->set_gemm_epilogues(l.epilogues);
      net->set_fused_kernels(l.kernels);
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
      auto loss = net->loss(tokens, targets);
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
      loss.backward();
      losses.push_back(loss.item<double>());
      std::vector<at::Tensor> g;
      for (const auto& p : net->parameters()) g.push_back(p.grad().flatten());
      grads.push_back(at::cat(g));
    }
    for (size_t i = 1; i < losses.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "levers #" << i);
      EXPECT_NEAR(losses[i], losses[0], 2e-3 * losses[0]);
      const double rel = ((grads[i] - grads[0]).norm() / grads[0].norm()).item<double>();
      EXPECT_LT(rel, 3e-2);
    }
  }
}

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return std::string(meshtrain::testing_support::kCudaKernels ? "" : "built without CUDA: no fused kernels to test");
  });
}
