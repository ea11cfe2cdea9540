// The fused ops off CUDA: each runs its composite ATen version (same value, same gradients), and the
// model's fused_kernels switch changes nothing on the CPU. The kernels themselves are checked against these
// composites on a GPU (tests/gpu/fused_kernels_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/fused_cross_entropy.h"
#include "meshtrain/model/fused_rope.h"
#include "meshtrain/model/fused_swiglu.h"
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

namespace {

ModelConfig tiny(const std::string& family) {
  ModelConfig m;
  m.family = family;
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
      model::Transformer net(tiny(family));
      net->init_weights(5);
      net->set_fused_kernels(fused);
      EXPECT_EQ(net->fused_kernels(), fused);
      for (size_t i = 0; i < net->blocks->size(); ++i) {  // the switch reaches every block
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->attn->fused(), fused);
        EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(i)->mlp->fused(), fused);
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
