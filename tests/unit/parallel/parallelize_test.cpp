#include "meshtrain/parallel/parallelize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "support/test_support.h"

using namespace meshtrain;

namespace {

Config tiny() {
  Config c;
  c.source = "test.yaml";
  c.model.vocab_size = 64;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.d_model = 16;
  c.model.max_seq_len = 8;
  c.data.train = "x";
  return c;
}

model::Transformer meta(const Config& c) { return model::Transformer(c.model, at::TensorOptions().device(at::kMeta)); }

}  // namespace

TEST(Parallelize, TensorParallelIsAClearErrorUntilAvailable) {
  Config c = tiny();
  c.parallel.tp = 2;
  resolve(c, 2);
  EXPECT_NE(testing_support::user_error([&] { parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU)); })
                .find("test.yaml: parallel.tp: given 2; valid 1"),
            std::string::npos);
}

TEST(Parallelize, ZeroStageWithFsdpIsValidated) {
  Config c = tiny();
  c.parallel.fsdp = 2;
  c.parallel.zero_stage = 2;
  EXPECT_NE(testing_support::user_error([&] { validate(c, 4); }).find("parallel.zero_stage: given 2 with parallel.fsdp 2"),
            std::string::npos);
  c.parallel.zero_stage = 4;
  EXPECT_NE(testing_support::user_error([&] { validate(c, 4); }).find("parallel.zero_stage"), std::string::npos);
}

TEST(Parallelize, SingleProcessLayouts) {
  for (int stage : {0, 1, 2, 3}) {
    Config c = tiny();
    c.parallel.zero_stage = stage;
    c.parallel.force_wrapper = true;
    resolve(c, 1);
    auto pm = parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU));
    EXPECT_EQ(pm->replicated(), stage == 0);
    auto tokens = at::randint(64, {2, 8}, at::kLong);
    auto loss = pm->loss(tokens, tokens);
    pm->backward(loss, true);
    for (const auto& p : pm->optimizer_params()) EXPECT_TRUE(p.param.grad().defined()) << p.name << " stage " << stage;
    EXPECT_GT(pm->clip_grad_norm(0).item<double>(), 0);
  }
}

// A group of one with fp32 compute: the sharded layouts run on the shards themselves (FullyShard's alias
// mode) and must train exactly as the plain model does — accumulation micro-steps, clipping, updates.
TEST(Parallelize, WorldOfOneShardedLayoutsTrainLikeThePlainModel) {
  auto train = [](int stage) {
    Config c = tiny();
    c.parallel.zero_stage = stage;
    c.parallel.force_wrapper = stage > 0;
    resolve(c, 1);
    auto pm = parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU));
    at::manual_seed(5);
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        auto tokens = at::randint(64, {2, 8}, at::kLong);
        auto loss = pm->loss(tokens, tokens.roll(1, 1));
        pm->backward(loss / 2, micro == 1);
        losses.push_back(loss.item<double>());
      }
      pm->clip_grad_norm(0.5);
      at::NoGradGuard no_grad;
      for (const auto& p : pm->optimizer_params()) p.param.sub_(p.param.grad() * 0.1);
      pm->after_optimizer_step();
    }
    std::map<std::string, at::Tensor> params;
    for (const auto& s : pm->sharded_parameters()) params[s.name] = s.local.detach().clone();
    return std::make_pair(losses, params);
  };
  const auto [want_losses, want_params] = train(0);
  for (int stage : {1, 2, 3}) {
    const auto [losses, params] = train(stage);
    ASSERT_EQ(losses.size(), want_losses.size());
    for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], want_losses[i], 1e-6) << "stage " << stage;
    ASSERT_EQ(params.size(), want_params.size());
    // Only the clipping norm's summation order differs from the plain model's.
    for (const auto& [name, t] : want_params)
      EXPECT_TRUE(at::allclose(params.at(name), t, 1e-5, 1e-7)) << name << " stage " << stage;
  }
}
