// AdamW::device_step (train/adamw.h) on a given device, for the train room's unit tests (CPU) and the GPU
// tests (CUDA): ATen's fused AdamW has a kernel for each, and each must take the clip divisor and the skip
// flag as the trainer hands them over.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "meshtrain/train/adamw.h"

namespace meshtrain::testing_support {

inline OptimizerConfig device_step_config() {
  OptimizerConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  return c;
}

// A weight that decays (odd size: the kernels' vector and scalar tails) and a bias that does not.
inline std::vector<train::Optimizer::Param> device_step_params(at::Device d) {
  at::manual_seed(11);
  return {{"w", at::randn({37, 29}).to(d).requires_grad_(), true}, {"b", at::randn({19}).to(d).requires_grad_(), false}};
}

inline std::vector<train::Optimizer::Param> clone_params(const std::vector<train::Optimizer::Param>& ps) {
  std::vector<train::Optimizer::Param> out;
  for (const auto& p : ps) out.push_back({p.name, p.param.detach().clone().requires_grad_(), p.decay});
  return out;
}

// Gradients of the step, the same for every optimizer given them.
inline std::vector<at::Tensor> gradients_like(const std::vector<train::Optimizer::Param>& ps, double scale) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(at::randn(p.param.sizes(), p.param.options()) * scale);
  return out;
}

inline void set_gradients(const std::vector<train::Optimizer::Param>& ps, const std::vector<at::Tensor>& grads) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].param.mutable_grad() = grads[i].clone();
}

// Every tensor of `a` (parameters, then state) equal to `b`'s, bit for bit.
inline void expect_identical(const train::AdamW& a, const train::AdamW& b, const std::string& when) {
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_TRUE(at::equal(a.params()[i].param, b.params()[i].param)) << when << ": " << a.params()[i].name;
  const auto sb = b.state_tensors();
  for (const auto& [name, t] : a.state_tensors()) EXPECT_TRUE(at::equal(t, sb.at(name))) << when << ": " << name;
}

// Four steps (the norm below max_norm, then well above it, by different factors) of device_step with the
// trainer's divisor max(1, (norm + 1e-6) / max_norm) against step() after the layouts' in-place clip by
// min(1, max_norm / (norm + 1e-6)): parameters and moments equal within fp32 rounding. The moments take the
// clipped gradient itself, so a divisor that did not reach the kernel (or multiplied) is off by the factor.
inline void expect_divisor_matches_in_place_clip(at::Device d) {
  const double lr = 1e-2, max_norm = 1.0;
  auto clipped = device_step_params(d);
  auto divided = clone_params(clipped);
  train::AdamW ref(clipped, device_step_config()), dev(divided, device_step_config());
  const at::Tensor keep = at::zeros({}, at::TensorOptions(at::kFloat).device(d));
  const double scales[] = {0.01, 30.0, 5.0, 200.0};
  for (int step = 0; step < 4; ++step) {
    const auto grads = gradients_like(clipped, scales[step]);
    at::Tensor norm = at::stack(at::_foreach_norm(grads, 2)).norm();
    EXPECT_EQ(norm.item<double>() > max_norm, step > 0) << "the steps clip from the second on";
    set_gradients(clipped, grads);
    set_gradients(divided, grads);
    std::vector<at::Tensor> g;
    for (const auto& p : clipped) g.push_back(p.param.mutable_grad());
    at::_foreach_mul_(g, at::clamp_max(max_norm / (norm + 1e-6), 1.0));
    ref.step(lr);
    dev.device_step(lr, at::clamp_min((norm + 1e-6) / max_norm, 1.0), keep);
    const auto sr = ref.state_tensors();
    for (const auto& [name, t] : dev.state_tensors()) {
      const double scale = sr.at(name).abs().max().item<double>();
      EXPECT_LE((t - sr.at(name)).abs().max().item<double>(), 1e-6 * scale) << "step " << step + 1 << ": " << name;
    }
    for (size_t i = 0; i < clipped.size(); ++i) {
      const auto& a = divided[i].param;
      const auto& b = clipped[i].param;
      EXPECT_LE((a - b).abs().max().item<double>(), 1e-6 * b.abs().max().item<double>())
          << "step " << step + 1 << ": " << clipped[i].name;
    }
  }
}

// A step with non-finite gradients and divisor (what a nan loss leaves), skip flag 1: parameters, exp_avg,
// exp_avg_sq and step counters bit-identical to before. The next step then matches, bit for bit, an
// optimizer that never saw the skipped one; a skip that did not reach the kernel would have written nan.
inline void expect_skip_leaves_state(at::Device d) {
  const double lr = 1e-2;
  auto live = device_step_params(d);
  auto never_skipped = clone_params(live);
  train::AdamW dev(live, device_step_config()), ref(never_skipped, device_step_config());
  const auto flag = [&](double v) { return at::full({}, v, at::TensorOptions(at::kFloat).device(d)); };

  auto grads = gradients_like(live, 1.0);
  set_gradients(live, grads);
  set_gradients(never_skipped, grads);
  dev.device_step(lr, flag(1.0), flag(0.0));
  ref.step(lr);
  expect_identical(dev, ref, "an applied step");

  grads = gradients_like(live, 1.0);
  grads[0].view({-1})[3].fill_(std::numeric_limits<float>::infinity());
  grads[1].view({-1})[0].fill_(std::numeric_limits<float>::quiet_NaN());
  set_gradients(live, grads);
  dev.device_step(lr, flag(std::numeric_limits<float>::quiet_NaN()), flag(1.0));
  expect_identical(dev, ref, "the skipped step");
  EXPECT_EQ(dev.state_tensors().at("w.step").item<float>(), 1.0f);

  grads = gradients_like(live, 1.0);
  set_gradients(live, grads);
  set_gradients(never_skipped, grads);
  dev.device_step(lr, at::Tensor(), flag(0.0));
  ref.step(lr);
  expect_identical(dev, ref, "the step after the skipped one");
  EXPECT_EQ(dev.state_tensors().at("w.step").item<float>(), 2.0f);
}

}  // namespace meshtrain::testing_support
