#include "meshtrain/parallel/parallelize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/parallel/full_tensor.h"
#include "support/cpu_allocation_count.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

Config tiny() {
  Config c;
  c.source = "test.yaml";
  c.model = testing_support::tiny_model({.n_head = 2, .d_model = 16, .max_seq_len = 8});
  c.data.train = {"x"};
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
        EXPECT_FALSE(pm->capturable());
        EXPECT_EQ(pm->describe().rfind("tp 2", 0), 0u) << pm->describe();
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
    EXPECT_FALSE(pm->capturable()) << "stage " << stage;  // a wrapper's hooks run in backward, even for one rank
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

// train.freeze, decided once in parallelize(): on the plain model, ZeRO-1/2 and FSDP (aliased fp32 shards, and
// gathered bf16 parameters) the frozen parameters leave the optimizer and the gradient norm, stay
// bit-identical through forward_backward and an update, and still appear once in sharded_parameters().
TEST(Parallelize, FrozenParametersKeepTheirValuesOnEveryLayout) {
  for (int stage : {0, 1, 2, 3})
    for (Dtype param_dtype : {Dtype::fp32, Dtype::bf16}) {
      if (stage == 0 && param_dtype == Dtype::bf16) continue;
      SCOPED_TRACE(cat("stage ", stage, " param_dtype ", param_dtype));
      Config c = tiny();
      c.parallel.zero_stage = stage;
      c.parallel.force_wrapper = true;
      c.parallel.param_dtype = param_dtype;
      c.train.freeze = {"blocks.0.*", "tok_embed.weight"};
      resolve(c, 1);
      validate(c, 1);
      auto pm = parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU));
      auto frozen = [](const std::string& n) { return n.rfind("blocks.0.", 0) == 0 || n == "tok_embed.weight"; };
      std::map<std::string, at::Tensor> before;
      for (const auto& s : pm->sharded_parameters()) before[s.name] = s.local.detach().clone();
      EXPECT_EQ(before.size(), meta(c)->named_parameters().size());
      for (const auto& p : pm->optimizer_params()) EXPECT_FALSE(frozen(p.name)) << p.name;
      auto tokens = at::randint(64, {2, 8}, at::kLong);
      const auto loss_sum = pm->forward_backward({{tokens, tokens.roll(1, 1)}, {tokens.flip({1}), tokens}});
      EXPECT_GT(loss_sum.item<double>(), 0);
      EXPECT_GT(pm->clip_grad_norm(0.1).item<double>(), 0);
      {
        at::NoGradGuard no_grad;
        for (const auto& p : pm->optimizer_params()) p.param.sub_(p.param.grad() * 0.1);
      }
      pm->after_optimizer_step();
      // (A trainable parameter may keep its value where its gradient is exactly 0, as gpt2's key biases can.)
      size_t trainable = 0, changed = 0;
      for (const auto& s : pm->sharded_parameters()) {
        const bool same = at::equal(s.local.detach(), before.at(s.name));
        if (frozen(s.name)) EXPECT_TRUE(same) << s.name;
        else trainable += 1, changed += same ? 0 : 1;
      }
      EXPECT_GT(changed, trainable / 2);
    }
}

TEST(Parallelize, FreezePatternsAreChecked) {
  Config c = tiny();
  c.train.freeze = {"blocks.0.*", "blocks.9.*"};
  resolve(c, 1);
  EXPECT_EQ(testing_support::user_error([&] { parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU)); }),
            "train.freeze: pattern 'blocks.9.*' matches no parameter (names look like tok_embed.weight or "
            "blocks.0.attn.wq.weight; '*' matches any characters)");
  c.train.freeze = {"*"};
  EXPECT_NE(testing_support::user_error([&] { parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU)); })
                .find("train.freeze: the patterns freeze all"),
            std::string::npos);
  c.train.freeze = {"blocks.0.*", ""};
  EXPECT_NE(testing_support::user_error([&] { validate(c, 1); }).find("test.yaml: train.freeze: given [blocks.0.*, ]"),
            std::string::npos);
}

TEST(Parallelize, MasterLocationAndDtypesAreTyped) {
  // The spellings are checked where the config is read (tests/unit/core/config_load_test.cpp).
  EXPECT_NE(testing_support::user_error([] { parse_config("", "test.yaml", false, {"parallel.master_location=host"}); })
                .find("parallel.master_location: given 'host'; valid device (the master weights and "
                      "optimizer state move to host memory with optimizer.offload: cpu)"),
            std::string::npos);
  EXPECT_EQ(testing_support::user_error([] { parse_config("", "test.yaml", false, {"parallel.param_dtype=bfloat16"}); }),
            "--set parallel.param_dtype=bfloat16: parallel.param_dtype: given 'bfloat16'; valid fp32 | bf16");
  Config c = tiny();
  EXPECT_EQ(c.parallel.master_location, MasterLocation::device);
  c.train.dtype = ComputeDtype::automatic;
  EXPECT_EQ(compute_dtype(c.train, /*cuda=*/true), Dtype::bf16);
  EXPECT_EQ(compute_dtype(c.train, /*cuda=*/false), Dtype::fp32);
}

// LoRA (docs/lora.md): only the adapters reach the optimizer, in fp32; the frozen base is held in the
// compute dtype — bf16 here — by the replicated layout (cast in place) and by FSDP (its frozen units' shards
// and gathered parameters), and a training step leaves it as it was.
TEST(Parallelize, LoraTrainsTheAdaptersAndHoldsTheBaseInTheComputeDtype) {
  for (int64_t stage : {0, 3}) {
    SCOPED_TRACE(cat("zero stage ", stage));
    Config c = tiny();
    c.model.family = Family::llama;
    c.model.lora_rank = 2;
    c.model.lora_targets = {"q", "v", "down"};
    c.train.dtype = ComputeDtype::bf16;
    c.parallel.zero_stage = stage;
    c.parallel.force_wrapper = true;  // the sharded layout over a group of one
    resolve(c, 1);
    validate(c, 1);
    auto pm = parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU));
    EXPECT_EQ(pm->replicated(), stage == 0);
    const auto opt = pm->optimizer_params();
    EXPECT_EQ(opt.size(), 2u * 3u * static_cast<size_t>(c.model.n_layer));
    for (const auto& p : opt) {
      EXPECT_NE(p.name.find(".lora_"), std::string::npos) << p.name;
      EXPECT_EQ(p.param.scalar_type(), at::kFloat) << p.name;
    }
    std::map<std::string, at::Tensor> before;
    for (const auto& s : pm->sharded_parameters()) {
      const bool adapter = s.name.find(".lora_") != std::string::npos;
      EXPECT_EQ(s.local.scalar_type(), adapter ? at::kFloat : at::kBFloat16) << s.name;
      if (!adapter) before[s.name] = s.local.clone();
    }
    const auto tokens = at::randint(c.model.vocab_size, {2, 9});
    std::vector<parallel::ParallelModel::MicroBatch> mb{{tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)}};
    const double loss = pm->forward_backward(mb).item<double>();
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_GT(pm->clip_grad_norm(1e9).item<double>(), 0.0);  // the adapters' gradients (B = 0: A's is zero)
    for (const auto& s : pm->sharded_parameters()) {
      if (before.count(s.name)) {
        EXPECT_TRUE(at::equal(before[s.name], s.local)) << s.name;
      }
    }
  }
}

// LoRA under the replicated layout gives the frozen base its storage in the compute dtype one parameter at a
// time: the most bytes alive while parallelize() builds the model is what the model then holds plus one frozen
// parameter drawn in fp32 (bf16 base, fp32 adapters and norms). Materialising the whole model in fp32 and
// casting afterwards peaked at 4 bytes per base parameter — on one H200 a 70B-shaped layer measured 3.20 GiB
// of peak_memory_bytes where its bf16 base is 1.59 GiB.
TEST(Parallelize, LoraDrawsTheFrozenBaseWithoutAnFp32CopyOfIt) {
  Config c = tiny();
  c.model.family = Family::llama;
  c.model.vocab_size = 32;
  c.model.n_layer = 4;
  c.model.d_ff = 64;  // w1, w2, w3: 1024 elements each, the largest parameters
  c.model.lora_rank = 2;
  c.model.lora_targets = {"q", "k", "v", "o", "gate", "up", "down"};
  c.train.dtype = ComputeDtype::bf16;
  resolve(c, 1);
  validate(c, 1);
  auto net = meta(c);
  int64_t largest_frozen = 0;
  {
    testing_support::CpuAllocationCount count;
    auto pm = parallel::parallelize(net, {}, c, at::Device(at::kCPU));
    int64_t held = 0, base = 0;
    for (const auto& s : pm->sharded_parameters()) {
      held += static_cast<int64_t>(s.local.nbytes());
      if (s.local.scalar_type() == at::kBFloat16) base += s.local.numel();
      if (s.local.scalar_type() == at::kBFloat16) largest_frozen = std::max(largest_frozen, s.local.numel());
    }
    EXPECT_EQ(largest_frozen, 1024);
    EXPECT_GE(count.now(), held);  // the model's parameters are among what is alive
    EXPECT_LE(count.peak(), count.now() + 4 * largest_frozen)
        << "peak " << count.peak() << " B while building; the model holds " << held << " B (" << base
        << " base parameters in bf16)";
  }
}
