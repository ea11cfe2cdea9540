#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/adamw.h"
#include "meshtrain/train/host_adamw.h"
#include "meshtrain/train/offloaded_adamw.h"

using namespace meshtrain;

namespace {

OptimizerConfig config() {
  OptimizerConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.offload = "cpu";
  c.offload_threads = 3;
  return c;
}

// Parameters of several sizes — one spanning many update tasks, one not a multiple of a task, a scalar-like
// one — in both decay groups; the same values for each optimizer.
std::vector<train::Optimizer::Param> make_params() {
  at::manual_seed(7);
  return {{"big", at::randn({300, 700}).requires_grad_(), true},
          {"odd", at::randn({65537}).requires_grad_(), true},
          {"bias", at::randn({5}).requires_grad_(), false},
          {"norm", at::randn({64}).requires_grad_(), false}};
}

std::vector<train::Optimizer::Param> clone(const std::vector<train::Optimizer::Param>& ps) {
  std::vector<train::Optimizer::Param> out;
  for (const auto& p : ps) out.push_back({p.name, p.param.detach().clone().requires_grad_(), p.decay});
  return out;
}

// The largest difference relative to the tensor's scale: fp32 rounding (ATen's vectorized kernel fuses
// multiply-adds this loop may not) leaves ~1e-7 per step, more where a moment cancels to near zero.
double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

}  // namespace

// Five steps with clipping applied inside the update (the offloaded way) against the layout's way (gradients
// scaled on the device first, then the fused kernel): equal within fp32 rounding, state included.
TEST(OffloadedAdamW, MatchesFusedAdamWWithClippingAndDecayGroups) {
  const OptimizerConfig c = config();
  auto on_device = make_params();
  auto offloaded = clone(on_device);
  train::AdamW ref(on_device, c);
  train::OffloadedAdamW off(offloaded, c);
  EXPECT_EQ(off.threads(), 3);
  for (int step = 1; step <= 5; ++step) {
    const double clip = step % 2 ? 0.37 : 1.0;  // clipping on odd steps
    const double lr = 1e-2 / step;
    for (size_t i = 0; i < on_device.size(); ++i) {
      const at::Tensor g = at::randn_like(on_device[i].param);
      on_device[i].param.mutable_grad() = g * static_cast<float>(clip);  // what clip_to leaves on the device
      offloaded[i].param.mutable_grad() = g.clone();
    }
    ref.step(lr);
    off.gradients_ready();
    off.step(lr, clip);
    for (size_t i = 0; i < on_device.size(); ++i)
      EXPECT_LT(max_rel_diff(offloaded[i].param, on_device[i].param), 2e-6) << on_device[i].name << " step " << step;
  }
  const auto a = off.state_tensors(), b = ref.state_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) EXPECT_LT(max_rel_diff(a.at(name), t), 2e-6) << name;
  EXPECT_EQ(a.at("big.step").item<float>(), 5.0f);
  // The step log's figures: every gradient down and every parameter up, 4 bytes an element.
  const int64_t elements = 300 * 700 + 65537 + 5 + 64;
  for (const auto& [key, value] : off.step_metrics()) {
    if (key == "D2H MB" || key == "H2D MB") {
      EXPECT_NEAR(value, 4.0 * elements / 1e6, 1e-9) << key;
    } else {
      EXPECT_EQ(key, "host update ms");
      EXPECT_GT(value, 0.0);
    }
  }
}

// A parameter without a gradient is skipped: its value and step count stay as they were.
TEST(OffloadedAdamW, SkipsParametersWithoutGradients) {
  auto ps = make_params();
  train::OffloadedAdamW off(ps, config());
  const at::Tensor before = ps[2].param.detach().clone();
  ps[0].param.mutable_grad() = at::ones_like(ps[0].param);
  off.step(1e-2);  // without gradients_ready(): step() starts the downloads itself
  EXPECT_TRUE(at::equal(ps[2].param, before));
  EXPECT_EQ(off.state_tensors().at("bias.step").item<float>(), 0.0f);
  EXPECT_EQ(off.state_tensors().at("big.step").item<float>(), 1.0f);
}

// Checkpoint state moves both ways between the two optimizers (same names, shapes), and a parameter written
// from outside (a checkpoint loaded) reaches the host master through parameters_changed().
TEST(OffloadedAdamW, StateMovesBetweenOptimizersAndLoadedParametersArePickedUp) {
  const OptimizerConfig c = config();
  auto a_params = make_params();
  train::AdamW a(a_params, c);
  for (auto& p : a_params) p.param.mutable_grad() = at::randn_like(p.param);
  a.step(1e-2);
  std::map<std::string, at::Tensor> saved;
  for (auto& [k, t] : a.state_tensors()) saved["optim." + k] = t.clone();

  auto b_params = make_params();
  train::OffloadedAdamW b(b_params, c);
  b.load_state_tensors(saved, "optim.");
  for (size_t i = 0; i < a_params.size(); ++i) {
    at::NoGradGuard no_grad;
    b_params[i].param.copy_(a_params[i].param);  // what loading the model blocks does
  }
  b.parameters_changed();
  // One more step of each from the same state: the same result.
  for (size_t i = 0; i < a_params.size(); ++i) {
    const at::Tensor g = at::randn_like(a_params[i].param);
    a_params[i].param.mutable_grad() = g;
    b_params[i].param.mutable_grad() = g.clone();
  }
  a.step(1e-2);
  b.step(1e-2);
  for (size_t i = 0; i < a_params.size(); ++i)
    EXPECT_LT(max_rel_diff(b_params[i].param, a_params[i].param), 2e-6) << a_params[i].name;
  saved["optim.big.exp_avg"] = at::zeros({3});
  EXPECT_THROW(b.load_state_tensors(saved, "optim."), UserError);
}

// The span kernel alone against the closed form in double.
TEST(HostAdamW, SpanMatchesTheClosedForm) {
  float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0.1f, 0.0f, -0.2f}, v[3] = {0.01f, 0.0f, 0.04f};
  const float g[3] = {0.3f, -0.1f, 2.0f};
  const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.5, t = 3, clip = 0.5;
  double rp[3], rm[3], rv[3];
  for (int i = 0; i < 3; ++i) {
    const double gi = g[i] * clip;
    rm[i] = b1 * m[i] + (1 - b1) * gi;
    rv[i] = b2 * v[i] + (1 - b2) * gi * gi;
    rp[i] = p[i] * (1 - lr * wd) - lr / (1 - std::pow(b1, t)) * rm[i] / (std::sqrt(rv[i] / (1 - std::pow(b2, t))) + eps);
  }
  train::adamw_update_span(p, g, m, v, 3, train::AdamWScalars::make(lr, b1, b2, eps, wd, t, clip));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(p[i], rp[i], 1e-6);
    EXPECT_NEAR(m[i], rm[i], 1e-7);
    EXPECT_NEAR(v[i], rv[i], 1e-8);
  }
}

TEST(OptimizerConfig, OffloadValueIsCheckedInOneLine) {
  EXPECT_EQ(parse_optimizer_offload("cpu"), OptimizerOffload::cpu);
  EXPECT_EQ(parse_optimizer_offload("none"), OptimizerOffload::none);
  try {
    parse_optimizer_offload("gpu");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer.offload: given 'gpu'; valid none | cpu");
  }
  auto ps = make_params();
  EXPECT_NE(dynamic_cast<train::OffloadedAdamW*>(train::make_optimizer(ps, config()).get()), nullptr);
  OptimizerConfig none = config();
  none.offload = "none";
  EXPECT_NE(dynamic_cast<train::AdamW*>(train::make_optimizer(ps, none).get()), nullptr);
}

// Streamed gradients (parallel/gradient_sink.h): each step's micro-batch gradients arrive one by one and are
// summed on the host in fp32 — the step's first overwrites what the previous step left, also after a step
// that was skipped (gradients_ready() without step()); the norm's squares come from the host sums. Against
// the fused kernel given the summed gradient: equal within fp32 rounding.
TEST(OffloadedAdamW, StreamedGradientsAccumulateOnTheHostPerStep) {
  const OptimizerConfig c = config();
  auto on_device = make_params();
  auto offloaded = clone(on_device);
  train::AdamW ref(on_device, c);
  train::OffloadedAdamW off(offloaded, c);
  parallel::GradientSink& sink = off;
  for (int step = 1; step <= 3; ++step) {
    double squares = 0;
    for (size_t i = 0; i < on_device.size(); ++i) {
      at::Tensor sum = at::zeros_like(on_device[i].param);
      for (int micro = 0; micro < 3; ++micro) {
        const at::Tensor g = at::randn_like(on_device[i].param);
        sum += g;
        sink.take_gradient(i, g);
      }
      on_device[i].param.mutable_grad() = sum;
      squares += sum.pow(2).sum().item<double>();
    }
    off.gradients_ready();
    double got = 0;
    for (size_t i = 0; i < on_device.size(); ++i) got += sink.squared_norm(i);
    EXPECT_NEAR(got, squares, 1e-5 * squares) << "step " << step;
    if (step == 2) continue;  // skipped (a non-finite step): the next step must not add to these sums
    ref.step(1e-2);
    off.step(1e-2);
    for (size_t i = 0; i < on_device.size(); ++i)
      EXPECT_LT(max_rel_diff(offloaded[i].param, on_device[i].param), 2e-6) << on_device[i].name << " step " << step;
  }
  EXPECT_EQ(off.state_tensors().at("big.step").item<float>(), 2.0f);
}
