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
  c.offload = OptimizerOffload::cpu;
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

namespace {

// Five steps with clipping applied inside the update (the offloaded way) against the layout's way (gradients
// scaled on the device first, then the fused kernel): equal within fp32 rounding, state included. `held_chunk`
// 0: the gradients downloaded whole; else held, taken through slots of that many elements (3 of them).
void check_five_steps_against_fused(int64_t held_chunk) {
  const OptimizerConfig c = config();
  auto on_device = make_params();
  auto offloaded = clone(on_device);
  train::AdamW ref(on_device, c);
  train::OffloadedAdamW off(offloaded, c);
  EXPECT_EQ(off.threads(), 3);
  if (held_chunk > 0) off.hold_gradients(held_chunk, /*slots=*/3);
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
    for (size_t i = 0; i < on_device.size(); ++i) {
      EXPECT_LT(max_rel_diff(offloaded[i].param, on_device[i].param), 2e-6) << on_device[i].name << " step " << step;
      // Held, the host master is the master: the parameter is its copy.
      if (held_chunk > 0) {
        EXPECT_TRUE(at::equal(off.master_of(offloaded[i].param), offloaded[i].param)) << on_device[i].name;
      }
    }
  }
  const auto a = off.state_tensors(), b = ref.state_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) EXPECT_LT(max_rel_diff(a.at(name), t), 2e-6) << name;
  EXPECT_EQ(a.at("big.step").item<float>(), 5.0f);
  // The step log's figures: every gradient down and every parameter up once, 4 bytes an element.
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

}  // namespace

TEST(OffloadedAdamW, MatchesFusedAdamWWithClippingAndDecayGroups) { check_five_steps_against_fused(0); }

// Held gradients (the layout keeps them on the device; step() takes them down in chunks through a few slots):
// chunks of 1000 elements through 3 slots cut every parameter across chunk and slot boundaries, and the
// parameters smaller than a chunk share the ring with the rest.
TEST(OffloadedAdamW, HeldGradientsGoThroughTheChunksLikeTheFusedUpdate) { check_five_steps_against_fused(1000); }

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

// Held under bf16 compute: the layout's parameters and gradients are bf16, the master fp32. Each step reads the
// bf16 gradient, updates the fp32 master as AdamW does from that gradient in fp32, and writes back the master's
// bf16 cast — every element of it exactly, chunk and slot boundaries included.
TEST(OffloadedAdamW, HeldBf16GradientsUpdateTheMasterAndWriteItsCast) {
  const OptimizerConfig c = config();
  auto masters = make_params();  // fp32: the reference AdamW's parameters are the master
  std::vector<train::Optimizer::Param> bf16;
  for (const auto& p : masters)
    bf16.push_back({p.name, p.param.detach().to(at::kBFloat16).requires_grad_(), p.decay});
  {
    at::NoGradGuard no_grad;  // the master starts as the cast's values, as a layout's switch leaves it
    for (size_t i = 0; i < masters.size(); ++i) masters[i].param.copy_(bf16[i].param);
  }
  train::AdamW ref(masters, c);
  train::OffloadedAdamW off(bf16, c);
  off.hold_gradients(/*chunk_elements=*/777, /*slots=*/2);
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < masters.size(); ++i) {
      const at::Tensor g = at::randn_like(masters[i].param).to(at::kBFloat16);
      bf16[i].param.mutable_grad() = g;
      masters[i].param.mutable_grad() = g.to(at::kFloat);
    }
    ref.step(1e-2);
    off.gradients_ready();
    off.step(1e-2);
    for (size_t i = 0; i < masters.size(); ++i) {
      const at::Tensor master = off.master_of(bf16[i].param);
      EXPECT_LT(max_rel_diff(master, masters[i].param), 2e-6) << masters[i].name << " step " << step;
      EXPECT_TRUE(at::equal(bf16[i].param, master.to(at::kBFloat16))) << masters[i].name << " step " << step;
    }
  }
  const int64_t elements = 300 * 700 + 65537 + 5 + 64;
  for (const auto& [key, value] : off.step_metrics()) {
    if (key == "D2H MB" || key == "H2D MB") {
      EXPECT_NEAR(value, 2.0 * elements / 1e6, 1e-9) << key;
    }
  }
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
  EXPECT_EQ(parse_enum<OptimizerOffload>("cpu", "optimizer.offload"), OptimizerOffload::cpu);
  EXPECT_EQ(parse_enum<OptimizerOffload>("none", "optimizer.offload"), OptimizerOffload::none);
  try {
    parse_enum<OptimizerOffload>("gpu", "optimizer.offload");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer.offload: given 'gpu'; valid none | cpu (did you mean 'cpu'?)");
  }
  auto ps = make_params();
  EXPECT_NE(dynamic_cast<train::OffloadedAdamW*>(train::make_optimizer(ps, config()).get()), nullptr);
  OptimizerConfig none = config();
  none.offload = OptimizerOffload::none;
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

namespace {

// A quadratic ½ Σ a_i (p_i − t_i)² with curvatures a_i in [1, 20], so that each gradient a ⊙ (p − t) depends
// on the parameters it is taken at: a delayed update shows in the trajectory only through that.
struct Quadratic {
  at::Tensor a, t;
  explicit Quadratic(int64_t n) {
    at::manual_seed(11);
    a = at::rand({n}, at::kDouble) * 19 + 1;
    t = at::randn({n}, at::kDouble);
  }
  at::Tensor grad(const at::Tensor& p) const { return a * (p.to(at::kDouble) - t); }
};

// Plain AdamW in double, written out: the reference the offloaded trajectories are held to.
struct ReferenceAdamW {
  const OptimizerConfig& c;
  at::Tensor p, m, v;
  int t = 0;
  void step(const at::Tensor& g, double lr) {
    ++t;
    m = c.beta1 * m + (1 - c.beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    p = p * (1 - lr * c.weight_decay) -
        lr / (1 - std::pow(c.beta1, t)) * m / ((v / (1 - std::pow(c.beta2, t))).sqrt() + c.eps);
  }
};

// `delay` 0: w_k = adamw(w_{k-1}, ∇(w_{k-1})). `delay` 1: the device computes step k's gradient on what it
// holds, w_{k-2} (the update of step k−1 is still on the host), so w_k = adamw(w_{k-1}, ∇(w_{k-2})).
std::vector<at::Tensor> reference_trajectory(const OptimizerConfig& c, const Quadratic& f, const at::Tensor& w0,
                                             int steps, int delay, double lr) {
  ReferenceAdamW ref{c, w0.to(at::kDouble), at::zeros_like(w0, at::kDouble), at::zeros_like(w0, at::kDouble)};
  std::vector<at::Tensor> w{ref.p};
  for (int k = 1; k <= steps; ++k) {
    ref.step(f.grad(w[static_cast<size_t>(std::max(0, k - 1 - delay))]), lr);
    w.push_back(ref.p);
  }
  return w;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b).abs().max() / b.abs().max()).item<double>();
}

// Steps 1..5 on the quadratic, the gradient taken at the parameters the optimizer left on the
// "device" (CPU tensors here: the host threads update while the next gradient is computed). `streamed`
// hands the gradient over through take_gradient() as a layout's backward would.
void check_delayed_trajectory(int delay, bool streamed) {
  OptimizerConfig c = config();
  c.offload_delay = delay;
  const int64_t n = 70000;  // more than one update span
  const Quadratic f(n);
  at::manual_seed(3);
  std::vector<train::Optimizer::Param> ps{{"w", at::randn({n}).requires_grad_(), true}};
  const double lr = 0.05;
  const auto want = reference_trajectory(c, f, ps[0].param.detach(), 5, delay, lr);
  const auto other = reference_trajectory(c, f, ps[0].param.detach(), 5, 1 - delay, lr);
  // The two trajectories must be told apart far beyond the tolerance, or this test could not fail.
  ASSERT_GT(rel_diff(other[5].to(at::kFloat), want[5]), 1e-3);
  train::OffloadedAdamW off(ps, c);
  for (int k = 1; k <= 5; ++k) {
    const at::Tensor g = f.grad(ps[0].param.detach()).to(at::kFloat);
    if (streamed) {
      static_cast<parallel::GradientSink&>(off).take_gradient(0, g);
    } else {
      ps[0].param.mutable_grad() = g;
    }
    off.gradients_ready();
    off.step(lr);
    // What the device holds for the next step: w_k, or delayed w_{k-1}.
    EXPECT_LT(rel_diff(ps[0].param.detach(), want[static_cast<size_t>(k - delay)]), 1e-5)
        << "delay " << delay << " step " << k;
  }
  // A sync point (what checkpoints read) lands the pending update: w_5 and five steps of state.
  const auto state = off.state_tensors();
  EXPECT_EQ(state.at("w.step").item<float>(), 5.0f);
  EXPECT_LT(rel_diff(ps[0].param.detach(), want[5]), 1e-5) << "delay " << delay << " after state_tensors()";
  // Delayed, the uploads counted are the previous update's: one parameter either way.
  for (const auto& [key, value] : off.step_metrics()) {
    if (key == "H2D MB") {
      EXPECT_NEAR(value, 4.0 * n / 1e6, 1e-9);
    } else if (key == "host update ms") {
      EXPECT_GT(value, 0.0);
    }
  }
}

}  // namespace

// optimizer.offload_delay: with 1 each step's gradient is one update stale and the parameters on the device
// lag one update until a sync point; with 0 the trajectory is plain AdamW's. Both against AdamW written out.
TEST(OffloadedAdamW, DelayedUpdateFollowsTheStaleGradientTrajectory) {
  for (int delay : {0, 1}) check_delayed_trajectory(delay, /*streamed=*/false);
}

TEST(OffloadedAdamW, DelayedUpdateWithStreamedGradients) {
  for (int delay : {0, 1}) check_delayed_trajectory(delay, /*streamed=*/true);
}

// Saving mid-run and resuming: a run that reads its state at step 3 (a checkpoint) and goes on equals a new
// optimizer loaded from that state at step 3 (a resumed run), step for step.
TEST(OffloadedAdamW, DelayedUpdateResumesExactlyFromItsState) {
  OptimizerConfig c = config();
  c.offload_delay = 1;
  const int64_t n = 1000;
  const Quadratic f(n);
  at::manual_seed(5);
  std::vector<train::Optimizer::Param> a_ps{{"w", at::randn({n}).requires_grad_(), true}};
  train::OffloadedAdamW a(a_ps, c);
  auto run_step = [&](train::OffloadedAdamW& opt, std::vector<train::Optimizer::Param>& ps) {
    ps[0].param.mutable_grad() = f.grad(ps[0].param.detach()).to(at::kFloat);
    opt.gradients_ready();
    opt.step(0.05);
  };
  for (int k = 1; k <= 3; ++k) run_step(a, a_ps);
  std::map<std::string, at::Tensor> saved;
  for (auto& [k, t] : a.state_tensors()) saved["optim." + k] = t.clone();
  const at::Tensor weights = a_ps[0].param.detach().clone();  // after state_tensors(): step 3's

  std::vector<train::Optimizer::Param> b_ps{{"w", at::zeros({n}).requires_grad_(), true}};
  train::OffloadedAdamW b(b_ps, c);
  b.load_state_tensors(saved, "optim.");
  {
    at::NoGradGuard no_grad;
    b_ps[0].param.copy_(weights);
  }
  b.parameters_changed();
  for (int k = 4; k <= 6; ++k) {
    run_step(a, a_ps);
    run_step(b, b_ps);
    EXPECT_TRUE(at::equal(a_ps[0].param, b_ps[0].param)) << "step " << k;
  }
  a.settle();
  b.settle();
  EXPECT_TRUE(at::equal(a_ps[0].param, b_ps[0].param));
  EXPECT_FALSE(at::equal(a_ps[0].param, weights));
}
