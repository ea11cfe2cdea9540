// FP8 matmuls (model/linear/fp8_linear.h) against bf16 on the GPU. Stated bounds, as relative Frobenius errors
// ‖fp8 − ref‖ / ‖ref‖ against the fp32 product of the same inputs:
//   - one matmul, e4m3 × e4m3, tensorwise or rowwise: ≤ 6 % (e4m3 keeps 3 mantissa bits: rounding leaves
//     ≈ 2.6 % rms per element, ≈ 3.7 % per product of two, and a sum of K products with independent errors
//     has the same relative error as its terms);
//   - a linear layer's forward ≤ 6 %; its gradients ∂x, ∂W with e5m2 gradients (2 mantissa bits, ≈ 5.2 % rms)
//     ≤ 10 %, with rowwise (e4m3 everywhere) ≤ 6 %;
//   - a whole model's loss within 1 % of the bf16 model's (the first step of a tiny Llama; with delayed scaling
//     the first two, the second scaled from the first's amaxes).
// Delayed scaling's first step is tensorwise bit for bit (no history yet: each cast's own amax); its later steps,
// scaled from the amaxes before, keep the layer's bounds.
// The casts run the CUDA kernels where the build has them: fp8_matmul is then the GEMM of the composite
// casts bit for bit (tests/gpu/fp8_cast_test.cpp checks the casts themselves), the layer's bounds hold on
// sizes that fill none of the kernels' tiles, and layers sharing one input's casts (q, k, v) give what three
// casts of their own give, bit for bit.
// FP8 weights for inference (model/linear/fp8_weight.h): the CUDA GEMM is the CPU's definition (the dequantized
// operands multiplied) within bf16 rounding of its result and the GEMM's accumulation, for 1 to 64 rows (a decode
// batch), and within the one-matmul bound of the fp32 product.
// Skipped (77) without a GPU that has FP8 matmuls.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/model/kernels/fp8_cast.h"
#include "meshtrain/model/linear/fp8_amax_history.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/linear/fp8_shared_input.h"
#include "meshtrain/model/linear/fp8_weight.h"
#include "meshtrain/model/transformer.h"
#include "support/autograd_graph.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;
using testing_support::graph_has;  // the result is a view of the function's: search the graph

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  auto g = got.to(at::kFloat), w = want.to(at::kFloat);
  return ((g - w).norm() / w.norm()).item<double>();
}

const char* name(Fp8Scaling s) { return enum_c_str(s); }

}  // namespace

TEST(Fp8Gpu, MatmulWithinTheStatedBound) {
  for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    at::manual_seed(0);
    auto a = at::randn({256, 1024}, kCuda).to(at::kBFloat16);
    auto b = (at::randn({1024, 512}, kCuda) * 0.02).to(at::kBFloat16);
    a.slice(0, 0, 8).mul_(30);  // a few outlier rows: rowwise scaling keeps the others' precision
    const auto ref = at::mm(a.to(at::kFloat), b.to(at::kFloat));
    auto y = model::fp8_matmul(a, b, s, at::kFloat8_e4m3fn, at::kFloat8_e4m3fn, at::kBFloat16);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_LE(rel_err(y, ref), 0.06) << name(s);
    // Not a bf16 matmul in disguise: a bf16 product's rounding is ≈ 0.2 %, FP8's several per cent.
    EXPECT_GE(rel_err(y, ref), 1e-2) << name(s);
  }
}

// The FP8 casts run the CUDA kernels (model/kernels/fp8_cast.h) where the build has them; their bytes are the
// composite's, so the GEMM's inputs and its result are too.
TEST(Fp8Gpu, MatmulIsTheGemmOfTheCompositeCasts) {
  for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    at::manual_seed(4);
    auto a = at::randn({80, 336}, kCuda).to(at::kBFloat16);  // no size a multiple of the kernels' 64 × 64 tile
    auto b = (at::randn({336, 208}, kCuda) * 0.02).to(at::kBFloat16);
    const auto y = model::fp8_matmul(a, b, s, at::kFloat8_e4m3fn, at::kFloat8_e4m3fn, at::kBFloat16);
    const auto ca = model::fp8_cast_composite(a, s, at::kFloat8_e4m3fn, model::Fp8Copies::rowmajor);
    const auto cb = model::fp8_cast_composite(b, s, at::kFloat8_e4m3fn, model::Fp8Copies::transposed);
    const bool rowwise = s == Fp8Scaling::rowwise;
    const auto want = at::_scaled_mm(ca.q, cb.qt.t(), ca.inv_scale, rowwise ? cb.inv_scale_t.t() : cb.inv_scale_t,
                                     std::nullopt, std::nullopt, at::kBFloat16);
    EXPECT_TRUE(at::equal(y, want)) << name(s);
  }
}

TEST(Fp8Gpu, LinearForwardAndGradientsWithinTheStatedBounds) {
  struct Case {
    int64_t batch, seq, in, out;
  };
  // Sizes that fill the cast kernels' tiles, and ones that leave every tile partial (240 rows, 336 in, 208 out).
  for (Case c : {Case{4, 64, 512, 768}, Case{3, 80, 336, 208}})
    for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
      at::manual_seed(1);
      auto x0 = at::randn({c.batch, c.seq, c.in}, kCuda).to(at::kBFloat16);
      auto w0 = at::randn({c.out, c.in}, kCuda) * 0.03, b0 = at::randn({c.out}, kCuda) * 0.1;
      auto dy = at::randn({c.batch, c.seq, c.out}, kCuda).to(at::kBFloat16);
      auto xr = x0.to(at::kFloat).requires_grad_(true), wr = w0.clone().requires_grad_(true),
           br = b0.clone().requires_grad_(true);
      auto ref = at::linear(xr, wr, br);
      ref.backward(dy.to(at::kFloat));
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
           b = b0.clone().requires_grad_(true);
      auto y = model::fp8_linear(x, w, b, s);
      ASSERT_TRUE(graph_has(y, "Fp8Linear"));
      y.backward(dy);
      const double g_bound = s == Fp8Scaling::rowwise ? 0.06 : 0.10;
      EXPECT_LE(rel_err(y, ref), 0.06) << name(s);
      EXPECT_LE(rel_err(x.grad(), xr.grad()), g_bound) << name(s);
      EXPECT_LE(rel_err(w.grad(), wr.grad()), g_bound) << name(s);
      EXPECT_LE(rel_err(b.grad(), br.grad()), 1e-2) << name(s);  // the bias gradient is a plain sum
      EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
      EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16);
    }
}

// Delayed scaling through one layer's amax histories, three steps: the first equals tensorwise bit for bit; the
// second and third (inputs and gradients halved, then doubled back: scaled from amaxes up to twice theirs) keep
// the tensorwise bounds.
TEST(Fp8Gpu, DelayedScalingIsTensorwiseAtFirstAndWithinTheBoundsAfter) {
  at::manual_seed(6);
  const auto x0 = at::randn({4, 64, 512}, kCuda).to(at::kBFloat16);
  const auto w0 = at::randn({768, 512}, kCuda) * 0.03, b0 = at::randn({768}, kCuda) * 0.1;
  const auto dy0 = at::randn({4, 64, 768}, kCuda).to(at::kBFloat16);
  const auto sites = c10::make_intrusive<model::Fp8LinearHistories>();
  for (int step = 0; step < 3; ++step) {
    const double f = step == 1 ? 0.5 : 1.0;
    const auto xs = (x0 * f).to(at::kBFloat16), dys = (dy0 * f).to(at::kBFloat16);
    const auto run = [&](Fp8Scaling s) {
      auto x = xs.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto y = model::fp8_linear(x, w, b0, s, nullptr, s == Fp8Scaling::delayed ? sites : nullptr);
      y.backward(dys);
      return std::vector<at::Tensor>{y, x.grad(), w.grad()};
    };
    const auto delayed = run(Fp8Scaling::delayed), tensorwise = run(Fp8Scaling::tensorwise);
    auto xr = xs.to(at::kFloat).requires_grad_(true), wr = w0.clone().requires_grad_(true);
    auto ref = at::linear(xr, wr, b0);
    ref.backward(dys.to(at::kFloat));
    const std::vector<at::Tensor> want{ref, xr.grad(), wr.grad()};
    const double bounds[] = {0.06, 0.10, 0.10};
    for (int i = 0; i < 3; ++i) {
      if (step == 0) {
        EXPECT_TRUE(at::equal(delayed[i], tensorwise[i])) << "output " << i;
      }
      EXPECT_LE(rel_err(delayed[i], want[i]), bounds[i]) << "step " << step << " output " << i;
    }
  }
  EXPECT_EQ(sites->input.casts(), 3);
  EXPECT_EQ(sites->weight.casts(), 3);
  EXPECT_EQ(sites->grad_output.casts(), 3);
}

// Attention's q, k, v read one input: cast once for the three (model/linear/fp8_shared_input.h), with the same
// outputs and gradients, bit for bit, as three casts of their own.
TEST(Fp8Gpu, LayersReadingOneInputShareItsCastsWithTheSameResults) {
  for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise}) {
    at::manual_seed(5);
    const auto x0 = at::randn({2, 64, 256}, kCuda).to(at::kBFloat16);
    std::vector<at::Tensor> w0, dy;
    for (int64_t out : {256, 128, 128}) {
      w0.push_back(at::randn({out, 256}, kCuda) * 0.03);
      dy.push_back(at::randn({2, 64, out}, kCuda).to(at::kBFloat16));
    }
    const auto run = [&](model::Fp8SharedInput* shared) {
      auto x = x0.clone().requires_grad_(true);
      std::vector<at::Tensor> ys, grads;
      for (const auto& w : w0) grads.push_back(w.clone().requires_grad_(true));
      for (const auto& w : grads) ys.push_back(model::fp8_linear(x, w, at::Tensor(), s, shared));
      torch::autograd::backward(ys, dy);
      for (auto& w : grads) w = w.grad();
      grads.push_back(x.grad());
      ys.insert(ys.end(), grads.begin(), grads.end());
      return ys;
    };
    model::Fp8SharedInput shared(3);
    const auto with = run(&shared);
    EXPECT_EQ(shared.casts_made(), 1) << name(s);
    const auto without = run(nullptr);
    for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(at::equal(with[i], without[i])) << name(s) << " " << i;
  }
}

TEST(Fp8Gpu, ModelLossWithinOnePercentOfBf16) {
  ModelConfig m;
  m.family = Family::llama;
  m.vocab_size = 512;
  m.n_layer = 2;
  m.n_head = 8;
  m.n_kv_head = 4;
  m.d_model = 256;
  m.d_ff = 768;
  m.max_seq_len = 128;
  m.tie_embeddings = false;
  for (Fp8Scaling s : {Fp8Scaling::tensorwise, Fp8Scaling::rowwise, Fp8Scaling::delayed}) {
    at::manual_seed(2);
    model::Transformer net(m, kCuda);
    net->init_weights(5);
    auto tokens = at::randint(0, m.vocab_size, {4, 128}, kCuda.dtype(at::kLong));
    auto targets = at::randint(0, m.vocab_size, {4, 128}, kCuda.dtype(at::kLong));
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    const double bf16 = net->loss(tokens, targets).item<double>();
    model::use_fp8(*net, s, /*min_width=*/0);  // a small model: every layer
    if (s == Fp8Scaling::delayed) {  // a first step records the amaxes the second is scaled from
      net->loss(tokens, targets).backward();
      net->zero_grad();
    }
    const auto l = net->loss(tokens, targets);
    EXPECT_TRUE(graph_has(l, "Fp8Linear")) << name(s);
    l.backward();
    model::use_fp8(*net, Fp8Scaling::off, 0);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    EXPECT_NEAR(l.item<double>(), bf16, 0.01 * bf16) << name(s);
    for (const auto& p : net->parameters()) ASSERT_TRUE(p.grad().defined() && p.grad().isfinite().all().item<bool>());
  }
}

TEST(Fp8Gpu, WeightLinearIsTheCpuDefinitionForAnyRowCount) {
  at::manual_seed(5);
  const auto w = (at::randn({272, 512}, kCuda) * 0.02).to(at::kBFloat16);
  const auto bias = (at::randn({272}, kCuda) * 0.1).to(at::kBFloat16);
  const model::Fp8Weight q = model::quantize_fp8_weight(w);
  ASSERT_EQ(q.q.scalar_type(), at::kFloat8_e4m3fn);
  const model::Fp8Weight q_cpu{q.q.cpu(), q.scale.cpu()};
  for (const int64_t rows : {1, 3, 16, 17, 64}) {
    const auto x = at::randn({rows, 512}, kCuda).to(at::kBFloat16);
    const auto y = model::fp8_weight_linear(x, q, bias);
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{rows, 272}));
    // The CPU's definition from the same bf16 input: its casts are the CUDA kernels' bytes (fp8_cast.h).
    const auto want = model::fp8_weight_linear(x.cpu(), q_cpu, bias.cpu());
    const double def = rel_err(y.cpu(), want), exact = rel_err(y, at::addmm(bias.to(at::kFloat), x.to(at::kFloat),
                                                                                w.to(at::kFloat).t()));
    std::printf("%lld rows: against the CPU definition %.2e, against the fp32 product %.3f\n",
                static_cast<long long>(rows), def, exact);
    EXPECT_LE(def, 1e-2) << rows << " rows";
    EXPECT_LE(exact, 0.06) << rows << " rows";
  }
}

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    const bool fp8 = meshtrain::model::fp8_matmul_available(c10::Device(at::kCUDA, 0));
    return std::string(fp8 ? "" : "no FP8 matmuls on this GPU");
  });
}
