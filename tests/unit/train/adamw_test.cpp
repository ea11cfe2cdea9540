#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/train/adamw.h"
#include "support/adamw_device_step.h"

using namespace meshtrain;

// Two steps of AdamW against the closed form of Loshchilov & Hutter (as torch.optim.AdamW computes it).
TEST(AdamW, MatchesTheClosedFormWithDecayGroups) {
  OptimizerConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.eps = 1e-8;
  c.weight_decay = 0.5;
  auto w = at::tensor({1.0f, -2.0f}).requires_grad_();
  auto b = at::tensor({0.5f}).requires_grad_();
  train::AdamW opt({{"w", w, true}, {"b", b, false}}, c);
  const std::vector<std::vector<float>> gw = {{0.1f, -0.3f}, {0.2f, 0.1f}};
  std::vector<double> ref_w = {1.0, -2.0}, m(2, 0), v(2, 0);
  for (int t = 1; t <= 2; ++t) {
    w.mutable_grad() = at::tensor(gw[t - 1]);
    b.mutable_grad() = at::tensor({0.25f});
    opt.step(0.01);
    for (int i = 0; i < 2; ++i) {
      ref_w[i] *= 1 - 0.01 * 0.5;
      m[i] = 0.9 * m[i] + 0.1 * gw[t - 1][i];
      v[i] = 0.99 * v[i] + 0.01 * gw[t - 1][i] * gw[t - 1][i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      ref_w[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  EXPECT_NEAR(w[0].item<double>(), ref_w[0], 1e-6);
  EXPECT_NEAR(w[1].item<double>(), ref_w[1], 1e-6);
  // No decay for b: constant gradient → two steps of exactly lr each (m̂/√v̂ = 1).
  EXPECT_NEAR(b.item<double>(), 0.5 - 0.02, 1e-6);
  EXPECT_EQ(opt.state_tensors().at("w.step").item<float>(), 2.0f);
}

TEST(AdamW, StateRoundTripAndShapeErrors) {
  OptimizerConfig c;
  auto w = at::ones({2, 3}).requires_grad_();
  train::AdamW a({{"w", w, true}}, c);
  w.mutable_grad() = at::ones({2, 3});
  a.step(0.1);
  std::map<std::string, at::Tensor> saved;
  for (auto& [k, t] : a.state_tensors()) saved["optim." + k] = t.clone();
  auto w2 = at::ones({2, 3}).requires_grad_();
  train::AdamW b({{"w", w2, true}}, c);
  b.load_state_tensors(saved, "optim.");
  EXPECT_TRUE(at::equal(b.state_tensors().at("w.exp_avg"), a.state_tensors().at("w.exp_avg")));
  saved["optim.w.exp_avg"] = at::zeros({3});
  EXPECT_THROW(b.load_state_tensors(saved, "optim."), UserError);
}

// The trainer's step without a host read (train/trainer.cpp): the clip as a divisor inside the fused kernel.
TEST(AdamW, DeviceStepDividesByTheClipAsTheLayoutsClipInPlace) {
  testing_support::expect_divisor_matches_in_place_clip(at::Device(at::kCPU));
}

// A skip flag of 1 leaves parameters and state untouched, and the run continues as if the step never came.
TEST(AdamW, DeviceStepSkipLeavesParametersAndStateUntouched) {
  testing_support::expect_skip_leaves_state(at::Device(at::kCPU));
}

TEST(AdamW, OnlyAnOptimizerOnTheDeviceStepsFromDeviceFlags) {
  OptimizerConfig c;
  train::AdamW a({{"w", at::ones({2}).requires_grad_(), true}}, c);
  EXPECT_TRUE(a.steps_on_device());
  EXPECT_THROW(a.device_step(0.1, at::Tensor(), at::zeros({1})), Error) << "the flag must be a 0-dim fp32 tensor";
}
