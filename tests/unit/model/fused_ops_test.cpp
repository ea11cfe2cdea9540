// The fused ops off CUDA: each runs its composite ATen version (same value, same gradients), and the
// model's fused_kernels switch changes nothing on the CPU. The kernels themselves are checked against these
// composites on a GPU (tests/gpu/fused_kernels_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/bias_linear.h"
#include "meshtrain/model/kernels/column_sum.h"
#include "meshtrain/model/kernels/fused_add_norm.h"
#include "meshtrain/model/kernels/fused_cross_entropy.h"
#include "meshtrain/model/linear/fused_linear_gelu.h"
#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/kernels/fused_swiglu.h"
#include "meshtrain/model/linear/gelu_mlp.h"
#include "meshtrain/model/kernels/lt_matmul.h"
#include "meshtrain/model/linear/master_linear.h"
#include "meshtrain/model/rotary.h"
#include "meshtrain/model/transformer.h"

using namespace meshtrain;

TEST(FusedOpsCpu, CrossEntropyAveragesOverNonIgnoredRows) {
  at::manual_seed(0);
  auto x0 = at::randn({6, 11}, at::kFloat);
  auto t = at::tensor({3, -100, 0, 10, -100, 7}, at::kLong);
  auto x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
  auto loss = model::fused_cross_entropy(x, t, -100, /*in_place=*/true);
  auto ref = at::cross_entropy_loss(xr, t, {}, at::Reduction::Mean, -100);
  // By hand: mean of −log_softmax at the target over the 4 rows that count.
  auto logp = at::log_softmax(x0, 1);
  const double manual = -(logp[0][3] + logp[2][0] + logp[3][10] + logp[5][7]).item<double>() / 4;
  EXPECT_NEAR(loss.item<double>(), manual, 1e-6);
  (loss * 0.5).backward();
  (ref * 0.5).backward();
  EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-6, 1e-7));
  EXPECT_EQ(x.grad()[1].abs().sum().item<float>(), 0.f);  // ignored rows get no gradient
  EXPECT_TRUE(at::equal(x.detach(), x0));                  // in place applies to the CUDA kernel only
}

TEST(FusedOpsCpu, CrossEntropyOverTheFirstClassesOnly) {
  at::manual_seed(2);
  auto x0 = at::randn({5, 13}, at::kFloat);
  auto t = at::tensor({3, -100, 0, 9, 8}, at::kLong);
  auto x = x0.clone().requires_grad_(true), xr = x0.narrow(1, 0, 10).clone().requires_grad_(true);
  auto loss = model::fused_cross_entropy(x, t, -100, false, /*classes=*/10);
  auto ref = at::cross_entropy_loss(xr, t, {}, at::Reduction::Mean, -100);
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6);
  loss.backward();
  ref.backward();
  EXPECT_TRUE(at::allclose(x.grad().narrow(1, 0, 10), xr.grad(), 1e-6, 1e-7));
  EXPECT_EQ(x.grad().narrow(1, 10, 3).abs().sum().item<float>(), 0.f);  // padding: no gradient
  EXPECT_THROW(model::fused_cross_entropy(x0, t, -100, false, 14), Error);
}

TEST(FusedOpsCpu, CrossEntropyRejectsMismatchedShapes) {
  auto x = at::randn({4, 5});
  EXPECT_THROW(model::fused_cross_entropy(x, at::zeros({3}, at::kLong)), Error);
  EXPECT_THROW(model::fused_cross_entropy(x.view({2, 2, 5}), at::zeros({2}, at::kLong)), Error);
}

TEST(FusedOpsCpu, RopeEqualsApplyRope) {
  at::manual_seed(1);
  const int64_t B = 2, T = 5, H = 3, hd = 8;
  auto base = at::randn({B, T, H, hd});
  auto inv = model::rope_inv_freq(hd, 500000.0, model::RopeScaling{.factor = 8.0});
  auto [cos, sin] = model::rope_tables(inv, 2, T);
  auto x = base.clone().requires_grad_(true), xr = base.clone().requires_grad_(true);
  auto y = model::fused_rope(x.transpose(1, 2), cos, sin);
  auto yr = model::apply_rope(xr.transpose(1, 2), cos, sin);
  EXPECT_TRUE(at::allclose(y, yr));
  auto dy = at::randn_like(y);
  (y * dy).sum().backward();
  (yr * dy).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), xr.grad()));
  EXPECT_THROW(model::fused_rope(x.transpose(1, 2), cos.narrow(0, 0, 4), sin.narrow(0, 0, 4)), Error);
}

TEST(FusedOpsCpu, SwigluEqualsSiluTimesUp) {
  at::manual_seed(2);
  auto g0 = at::randn({3, 7}), u0 = at::randn({3, 7});
  auto g = g0.clone().requires_grad_(true), u = u0.clone().requires_grad_(true);
  auto gr = g0.clone().requires_grad_(true), ur = u0.clone().requires_grad_(true);
  auto y = model::fused_swiglu(g, u);
  auto yr = at::silu(gr) * ur;
  EXPECT_TRUE(at::allclose(y, yr));
  y.sum().backward();
  yr.sum().backward();
  EXPECT_TRUE(at::allclose(g.grad(), gr.grad()));
  EXPECT_TRUE(at::allclose(u.grad(), ur.grad()));
  EXPECT_THROW(model::fused_swiglu(g0, u0.t()), Error);
}

TEST(FusedOpsCpu, AddNormIsTheSumAndItsNormByHand) {
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms" : "layer");
    at::manual_seed(rms ? 7 : 8);
    const double eps = 1e-5;
    auto x0 = at::randn({2, 3, 11}), r0 = at::randn({2, 3, 11}), w0 = at::randn({11}), b0 = at::randn({11});
    auto x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
    auto w = w0.clone().requires_grad_(true), b = rms ? at::Tensor() : b0.clone().requires_grad_(true);
    auto [h, y] = model::fused_add_norm(x, r, w, b, rms, eps);
    // By hand, from the definitions.
    auto hh = x0 + r0;
    auto centred = rms ? hh : hh - hh.mean(-1, true);
    auto var = rms ? (hh * hh).mean(-1, true) : (centred * centred).mean(-1, true);
    auto manual = centred / at::sqrt(var + eps) * w0;
    if (!rms) manual = manual + b0;
    EXPECT_TRUE(at::equal(h, hh));
    EXPECT_TRUE(at::allclose(y, manual, 1e-5, 1e-6));
    // Gradients through both outputs, against the composite ops.
    auto xr = x0.clone().requires_grad_(true), rr = r0.clone().requires_grad_(true);
    auto wr = w0.clone().requires_grad_(true), br = rms ? at::Tensor() : b0.clone().requires_grad_(true);
    auto hr = xr + rr;
    auto yr = rms ? at::rms_norm(hr, {11}, wr, eps) : at::layer_norm(hr, {11}, wr, br, eps);
    auto dh = at::randn_like(hh), dy = at::randn_like(hh);
    ((h * dh).sum() + (y * dy).sum()).backward();
    ((hr * dh).sum() + (yr * dy).sum()).backward();
    EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(r.grad(), rr.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(w.grad(), wr.grad(), 1e-5, 1e-6));
    if (!rms) {
      EXPECT_TRUE(at::allclose(b.grad(), br.grad(), 1e-5, 1e-6));
    }
    // The norm alone: the same definition applied to x.
    auto xc = x0 - (rms ? at::zeros_like(x0) : x0.mean(-1, true));
    auto xv = rms ? (x0 * x0).mean(-1, true) : (xc * xc).mean(-1, true);
    auto by_hand = xc / at::sqrt(xv + eps) * w0 + (rms ? at::zeros_like(b0) : b0);
    EXPECT_TRUE(at::allclose(model::fused_norm(x0, w0, rms ? at::Tensor() : b0, rms, eps), by_hand, 1e-5, 1e-6));
    auto [xs, ys] = model::fused_norm_pass(x0, w0, rms ? at::Tensor() : b0, rms, eps);
    EXPECT_TRUE(at::equal(xs, x0));
    EXPECT_TRUE(at::allclose(ys, by_hand, 1e-5, 1e-6));
  }
  auto x = at::randn({4, 6});
  EXPECT_THROW(model::fused_add_norm(x, at::randn({4, 5}), at::ones({6}), at::zeros({6}), false, 1e-5), Error);
  EXPECT_THROW(model::fused_add_norm(x, x, at::ones({5}), at::Tensor(), true, 1e-5), Error);
  EXPECT_THROW(model::fused_add_norm(x, x, at::ones({6}), at::Tensor(), false, 1e-5), Error);  // LayerNorm, no bias
  EXPECT_THROW(model::fused_norm_pass(x, at::ones({5}), at::zeros({5}), false, 1e-5), Error);
}

TEST(FusedOpsCpu, LinearGeluIsTanhGeluOfTheLinearByHand) {
  at::manual_seed(9);
  auto x0 = at::randn({2, 5, 7}), w0 = at::randn({13, 7}) * 0.5, b0 = at::randn({13});
  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto y = model::fused_linear_gelu(x, w, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, 13}));
  // GPT-2's GELU: 0.5·p·(1 + tanh(√(2/π)·(p + 0.044715·p³))).
  auto p = at::matmul(x0, w0.t()) + b0;
  auto manual = 0.5 * p * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (p + 0.044715 * p * p * p)));
  EXPECT_TRUE(at::allclose(y, manual, 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(y, at::gelu(p), 1e-5, 1e-6));  // not the erf GELU
  auto xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true), br = b0.clone().requires_grad_(true);
  auto yr = at::gelu(at::linear(xr, wr, br), "tanh");
  auto dy = at::randn_like(yr);
  (y * dy).sum().backward();
  (yr * dy).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(w.grad(), wr.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(b.grad(), br.grad(), 1e-5, 1e-6));
  EXPECT_THROW(model::fused_linear_gelu(x0, w0.t(), b0), Error);
  EXPECT_THROW(model::fused_linear_gelu(x0, w0, at::Tensor()), Error);
}

// The cuBLASLt-epilogue ops off CUDA: bias_linear is x·Wᵀ + b and gelu_mlp is proj(gelu_tanh(fc(x))) by hand,
// with at::linear's gradients; the GEMM wrapper takes no CPU tensor.
TEST(FusedOpsCpu, BiasLinearAndGeluMlpAreTheirCompositesByHand) {
  at::manual_seed(11);
  auto x0 = at::randn({2, 5, 7}), w0 = at::randn({12, 7}) * 0.5, b0 = at::randn({12});
  auto w2 = at::randn({6, 12}) * 0.5, b2 = at::randn({6});
  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto y = model::bias_linear(x, w, b);
  EXPECT_TRUE(at::allclose(y, at::matmul(x0, w0.t()) + b0, 1e-5, 1e-6));
  y.sum().backward();
  EXPECT_TRUE(at::allclose(b.grad(), at::full({12}, 10.0), 1e-6, 1e-6));  // 2·5 rows of ∂y = 1
  EXPECT_TRUE(at::allclose(w.grad(), x0.reshape({-1, 7}).sum(0).expand({12, 7}), 1e-5, 1e-6));

  auto p = at::matmul(x0, w0.t()) + b0;
  auto h = 0.5 * p * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (p + 0.044715 * p * p * p)));
  auto m = model::gelu_mlp(x0, w0, b0, w2, b2);
  ASSERT_EQ(m.sizes(), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_TRUE(at::allclose(m, at::matmul(h, w2.t()) + b2, 1e-5, 1e-6));
  const auto r = at::randn({2, 5, 6});  // the residual added to the output
  EXPECT_TRUE(at::allclose(model::gelu_mlp(x0, w0, b0, w2, b2, r), r + at::matmul(h, w2.t()) + b2, 1e-5, 1e-6));
  EXPECT_THROW(model::gelu_mlp(x0, w0, b0, w2, b2, r.narrow(2, 0, 5)), Error);
  EXPECT_THROW(model::bias_linear(x0, w0.t(), b0), Error);
  EXPECT_THROW(model::gelu_mlp(x0, w0, b0, w2.t(), b2), Error);
  EXPECT_THROW(model::gelu_mlp(x0, w0, b0, w2, at::Tensor()), Error);
  auto out = at::empty({5, 12});
  EXPECT_FALSE(model::lt::run({.a = x0[0], .b = w0, .trans_b = true, .out = out}));
}

namespace {

ModelConfig tiny_fused_model(const std::string& family) {
  ModelConfig m;
  m.family = parse_enum<Family>(family, "family");
  m.vocab_size = 67;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = family == "llama" ? 2 : 4;
  m.d_model = 32;
  m.d_ff = 96;
  m.max_seq_len = 16;
  m.rope_theta = 10000;
  return m;
}

}  // namespace

TEST(FusedOpsCpu, ModelSwitchGivesTheSameLossAndGradients) {
  for (const char* family : {"llama", "gpt2"}) {
    at::manual_seed(3);
    auto tokens = at::randint(0, 67, {2, 9}, at::kLong), targets = at::randint(0, 67, {2, 9}, at::kLong);
    std::vector<at::Tensor> losses, grads;
    for (bool fused : {true, false}) {
      model::Transformer net(tiny_fused_model(family));
      net->init_weights(5);
      net->set_fused_kernels(fused);
      EXPECT_EQ(net->fused_kernels(), fused);
      for (size_t i = 0; i < net->blocks->size(); ++i) {  // the switch reaches every block
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->attn->fused(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->fused(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->fused_gelu(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->epilogues(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp_norm->fused(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->attn->wo->fused_bias(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->down->fused_bias(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->attn->wq->master_grads(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->up->master_grads(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->attn->wk->fused_adds(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->down->fused_adds(), fused);
      }
      auto loss = net->loss(tokens, targets);
      loss.backward();
      losses.push_back(loss.detach());
      std::vector<at::Tensor> g;
      for (const auto& p : net->parameters()) g.push_back(p.grad().flatten());
      grads.push_back(at::cat(g));
    }
    EXPECT_TRUE(at::allclose(losses[0], losses[1], 1e-6, 1e-7)) << family;
    EXPECT_TRUE(at::allclose(grads[0], grads[1], 1e-5, 1e-7)) << family;
  }
}

// master_linear and column_sum off CUDA: at::linear and at::sum, value for value, gradients in the parameters'
// dtype as at::linear gives them; checks its arguments.
TEST(FusedOpsCpu, MasterLinearAndColumnSumAreTheCompositeOps) {
  at::manual_seed(2);
  auto x0 = at::randn({3, 5, 12}), w0 = at::randn({7, 12}), b0 = at::randn({7});
  for (bool with_bias : {true, false}) {
    auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    auto b = with_bias ? b0.clone().requires_grad_(true) : at::Tensor();
    auto xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
    auto br = with_bias ? b0.clone().requires_grad_(true) : at::Tensor();
    EXPECT_FALSE(model::master_linear_applies(x, w, b));
    auto y = model::master_linear(x, w, b), yr = at::linear(xr, wr, br);
    EXPECT_TRUE(at::equal(y, yr));
    y.square().sum().backward();
    yr.square().sum().backward();
    EXPECT_TRUE(at::equal(x.grad(), xr.grad()));
    EXPECT_TRUE(at::equal(w.grad(), wr.grad()));
    if (with_bias) {
      EXPECT_TRUE(at::equal(b.grad(), br.grad()));
    }
  }
  EXPECT_THROW(model::master_linear(x0, w0.t(), b0), Error);
  EXPECT_THROW(model::master_linear(x0, w0, at::randn({6})), Error);
  auto m = at::randn({9, 4}).to(at::kBFloat16);
  auto s = model::column_sum(m, at::kFloat);
  EXPECT_EQ(s.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(s, m.to(at::kFloat).sum(0), 1e-6, 1e-6));
  EXPECT_THROW(model::column_sum(at::randn({3}), at::kFloat), Error);
}

TEST(FusedOpsCpu, NormAndGeluLeversSwitchOnlyTheirKernelAndFollowTheMainSwitch) {
  model::Transformer net(tiny_fused_model("gpt2"));
  auto block = [&] { return net->blocks->ptr<model::BlockImpl>(1); };
  EXPECT_TRUE(block()->attn_norm->fused());
  EXPECT_TRUE(net->final_norm->fused());  // the final norm follows the blocks' norm lever
  net->set_fused_norm(false);
  EXPECT_FALSE(block()->mlp_norm->fused());
  EXPECT_FALSE(net->final_norm->fused());
  EXPECT_FALSE(block()->attn_norm->fused());
  EXPECT_TRUE(block()->mlp->fused_gelu());
  EXPECT_TRUE(block()->attn->fused());
  EXPECT_TRUE(block()->attn->wq->fused_bias());  // the GEMM epilogues: on by default (measured on an H200)
  EXPECT_TRUE(block()->mlp->epilogues());
  net->set_gemm_epilogues(false);
  EXPECT_FALSE(block()->attn->wq->fused_bias());
  EXPECT_FALSE(block()->mlp->epilogues());
  net->set_gemm_epilogues(true);  // the MLP function and every linear's bias gradient
  EXPECT_TRUE(block()->attn->wq->fused_bias());
  EXPECT_TRUE(block()->mlp->up->fused_bias());
  EXPECT_TRUE(block()->mlp->epilogues());
  net->set_fused_gelu(false);  // fc's bias + GELU kernel alone
  EXPECT_FALSE(block()->mlp->fused_gelu());
  EXPECT_TRUE(block()->attn->wq->fused_bias());
  EXPECT_TRUE(block()->mlp->fused());
  net->set_fused_norm(true);
  net->set_fused_gelu(true);
  net->set_fused_kernels(false);  // the main switch turns every lever off ...
  EXPECT_FALSE(block()->mlp_norm->fused());
  EXPECT_FALSE(block()->mlp->fused_gelu());
  net->set_fused_norm(true);  // ... and a lever cannot turn itself back on under it
  EXPECT_FALSE(block()->mlp_norm->fused());
  net->set_fused_kernels(true);
  EXPECT_TRUE(block()->mlp_norm->fused());
  EXPECT_TRUE(net->final_norm->fused());
  EXPECT_TRUE(block()->mlp->fused_gelu());
  EXPECT_TRUE(block()->attn->wv->fused_bias());
  net->set_gemm_epilogues(false);
  EXPECT_FALSE(block()->attn->wv->fused_bias());
  EXPECT_FALSE(block()->mlp->epilogues());
  EXPECT_TRUE(block()->mlp->down->fused_adds());  // the GEMM adds: on by default, a lever of their own
  net->set_fused_adds(false);
  EXPECT_FALSE(block()->mlp->down->fused_adds());
  EXPECT_FALSE(block()->attn->wq->fused_adds());
  EXPECT_TRUE(block()->attn->wq->master_grads());
  net->set_fused_adds(true);
  EXPECT_TRUE(block()->attn->wq->fused_adds());
}
