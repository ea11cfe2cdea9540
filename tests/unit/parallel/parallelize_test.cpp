#include "meshtrain/parallel/parallelize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/parallel/full_tensor.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

Config tiny() {
  Config c;
  c.source = "test.yaml";
  c.model = testing_support::tiny_model({.n_head = 2, .d_model = 16, .max_seq_len = 8});
  c.data.train = "x";
  return c;
}

model::Transformer meta(const Config& c) { return model::Transformer(c.model, at::TensorOptions().device(at::kMeta)); }

}  // namespace

// Every layout over tensor parallelism hands checkpoints blocks of the global tensors: over the ranks of a
// job, the blocks marked `write` tile each parameter exactly once (FSDP's dim-0 chunk inside the TP block —
// vocab 67 gives uneven TP blocks whose FSDP chunks are uneven again), and each block holds the
// single-process model's values there. Fake communicators stand in for the other ranks (no collective runs
// while a model is built).
TEST(Parallelize, TensorParallelShardsTileEveryParameterOnce) {
  for (const char* layout : {"ddp", "fsdp"}) {
    Config c = tiny();
    c.model.vocab_size = 67;
    c.model.n_head = 4;
    c.train.seed = 7;
    c.parallel.tp = 2;
    c.parallel.fsdp = std::string(layout) == "fsdp" ? 2 : 1;
    resolve(c, 4);
    validate(c, 4);
    model::Transformer whole(c.model);
    whole->init_weights(c.train.seed);
    std::map<std::string, at::Tensor> covered;
    for (int dp = 0; dp < 2; ++dp)
      for (int tp = 0; tp < 2; ++tp) {
        parallel::ParallelGroups g;
        g.world = comm::make_fake_communicator(dp * 2 + tp, 4);
        g.dp = comm::make_fake_communicator(c.parallel.fsdp == 1 ? dp : 0, c.parallel.fsdp == 1 ? 2 : 1);
        g.fsdp = comm::make_fake_communicator(c.parallel.fsdp == 1 ? 0 : dp, static_cast<int>(c.parallel.fsdp));
        g.tp = comm::make_fake_communicator(tp, 2);
        auto pm = parallel::parallelize(meta(c), g, c, at::Device(at::kCPU));
        EXPECT_FALSE(pm->replicated());
        ASSERT_NE(pm->tensor_parallel(), nullptr);
        for (const auto& s : pm->sharded_parameters()) {
          SCOPED_TRACE(cat(layout, " dp/fsdp ", dp, " tp ", tp, " ", s.name));
          const at::Tensor full = whole->named_parameters()[s.name];
          ASSERT_EQ(s.global_shape, full.sizes().vec());
          auto block = parallel::block_of(full.detach(), s);
          EXPECT_TRUE(at::equal(s.local.detach(), block));
          auto& count = covered.try_emplace(s.name, at::zeros(full.sizes(), at::kInt)).first->second;
          if (s.write) parallel::block_of(count, s).add_(1);
        }
      }
    for (const auto& [name, count] : covered)
      EXPECT_TRUE(at::equal(count, at::ones_like(count)))
          << layout << " " << name << ": written " << count.min().item<int>() << " to " << count.max().item<int>()
          << " times";
  }
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
