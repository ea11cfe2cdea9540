// apply_tensor_parallel in one process: the layout of every parameter on each rank of a group (the fake
// backend stands in for the group: sharding itself talks to no one), meta-device models getting exactly the
// blocks of the full initialisation, the loss through the TP hooks with a group of one, and the configuration
// errors; serving's fused projections (model/fused_projections.h) over a rank's column-parallel shards. Multi-rank
// numerics are tests/multiproc/tp (real processes).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <functional>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/parallel/tp/tensor_parallel.h"
#include "meshtrain/parallel/tp/tp_vocab_parallel_embedding.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

Config tiny(const std::string& family, int64_t tp) {
  Config c;
  // vocab 70 is not divisible by 4: uneven vocabulary blocks. llama: GQA, 2 query heads per key/value head.
  c.model = testing_support::tiny_model({.family = family, .vocab_size = 70, .n_head = 8,
                                         .n_kv_head = family == "llama" ? 4 : 8, .d_ff = 64, .rope_theta = 10000});
  c.parallel.tp = tp;
  c.train.device = TrainDevice::cpu;
  c.train.seed = 5;
  return c;
}

model::Transformer initialised(const Config& c) {
  model::Transformer m(c.model);
  m->init_weights(c.train.seed);
  return m;
}

// Which dim a parameter is split on under TP (-1: replicated).
int64_t split_dim(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("norm") || has("pos_embed")) return -1;
  if (has("attn.wo.") || has("mlp.proj.") || has("mlp.w2.")) return has(".weight") ? 1 : -1;
  return 0;  // wq/wk/wv/fc/w1/w3 weights and biases, tok_embed, lm_head
}

}  // namespace

TEST(TpApply, EveryParameterIsItsBlockOfTheFullModel) {
  for (const std::string family : {"gpt2", "llama"}) {
    for (int64_t tp : {2, 4}) {
      const auto c = tiny(family, tp);
      auto full = initialised(c);
      const auto ref = full->named_parameters();
      for (int r = 0; r < tp; ++r) {
        auto m = initialised(c);
        auto meta = model::Transformer(c.model, at::TensorOptions().device(at::kMeta));
        auto t = apply_tensor_parallel(*m, comm::make_fake_communicator(r, static_cast<int>(tp)), c);
        auto tm = apply_tensor_parallel(*meta, comm::make_fake_communicator(r, static_cast<int>(tp)), c);
        auto shards = t->sharded_parameters(*m);
        auto meta_shards = tm->sharded_parameters(*meta);
        ASSERT_EQ(shards.size(), ref.size());
        for (size_t i = 0; i < shards.size(); ++i) {
          const auto& s = shards[i];
          SCOPED_TRACE(family + " tp" + std::to_string(tp) + " rank " + std::to_string(r) + " " + s.name);
          const auto& g = ref[s.name];
          EXPECT_EQ(s.global_shape, g.sizes().vec());
          const int64_t d = split_dim(s.name);
          auto want = g;
          if (d >= 0) {
            const int64_t n = g.size(d);
            const int64_t start = s.name.find("embed") != std::string::npos || s.name.rfind("lm_head", 0) == 0
                                      ? vocab_block(n, r, static_cast<int>(tp)).start
                                      : r * (n / tp);
            EXPECT_EQ(s.offsets[d], start);
            want = g.narrow(d, start, s.local.size(d));
          } else {
            EXPECT_EQ(s.local.sizes(), g.sizes());
          }
          EXPECT_TRUE(at::equal(s.local, want));
          EXPECT_EQ(s.write, d >= 0 || r == 0);
          EXPECT_TRUE(s.local.requires_grad());
          // Meta-built: only the block was allocated, with the same numbers.
          EXPECT_EQ(meta_shards[i].name, s.name);
          EXPECT_FALSE(meta_shards[i].local.is_meta());
          EXPECT_TRUE(at::equal(meta_shards[i].local, want));
        }
        EXPECT_EQ(static_cast<bool>(m->lm_head), family != "gpt2");  // tied stays tied: no separate head
      }
    }
  }
}

TEST(TpApply, GroupOfOneGivesThePlainLossAndGradients) {
  for (const std::string family : {"gpt2", "llama"}) {
    auto c = tiny(family, 1);
    auto plain = initialised(c);
    auto tp = initialised(c);
    apply_tensor_parallel(*tp, comm::make_fake_communicator(0, 1), c);
    auto tokens = at::randint(0, c.model.vocab_size, {2, 8}, at::kLong);
    auto targets = at::randint(0, c.model.vocab_size, {2, 8}, at::kLong);
    auto a = plain->loss(tokens, targets), b = tp->loss(tokens, targets);
    EXPECT_NEAR(a.item<float>(), b.item<float>(), 1e-5) << family;
    a.backward();
    b.backward();
    auto pa = plain->named_parameters(), pb = tp->named_parameters();
    for (const auto& item : pa)
      EXPECT_TRUE(at::allclose(item.value().grad(), pb[item.key()].grad(), 1e-4, 1e-6)) << family << " " << item.key();
    EXPECT_TRUE(at::allclose(plain->forward(tokens), tp->forward(tokens), 1e-5, 1e-6)) << family;
  }
}

// What tp does not split evenly is validate()'s to refuse (config_validate_test.cpp); reaching the layer with it
// is a bug, not a user's mistake.
TEST(TpApply, WhatValidateRefusesIsABugHere) {
  const auto bug = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const UserError& e) {
      return cat("UserError: ", e.what());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<nothing thrown>");
  };
  auto c = tiny("llama", 4);
  c.model.n_kv_head = 2;
  auto m = initialised(c);
  auto msg = bug([&] { apply_tensor_parallel(*m, comm::make_fake_communicator(0, 4), c); });
  EXPECT_NE(msg.find("apply_tensor_parallel: parallel.tp 4 must divide n_head 8, n_kv_head 2"), std::string::npos)
      << msg;
  c = tiny("gpt2", 3);
  m = initialised(c);
  msg = bug([&] { apply_tensor_parallel(*m, comm::make_fake_communicator(0, 3), c); });
  EXPECT_NE(msg.find("parallel.tp 3 must divide n_head 8"), std::string::npos) << msg;
  c = tiny("gpt2", 2);
  c.model.dropout = 0.1;
  m = initialised(c);
  msg = bug([&] { apply_tensor_parallel(*m, comm::make_fake_communicator(0, 2), c); });
  EXPECT_NE(msg.find("no dropout (validate() refuses it otherwise)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("UserError"), std::string::npos) << msg;
}

TEST(TpApply, SequenceParallelListsThePartialGradients) {
  auto c = tiny("gpt2", 2);
  c.parallel.sequence_parallel = true;
  auto m = initialised(c);
  auto t = apply_tensor_parallel(*m, comm::make_fake_communicator(0, 2), c);
  const auto& names = t->partial_gradients();
  auto listed = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(listed("blocks.0.attn_norm.weight"));
  EXPECT_TRUE(listed("blocks.1.mlp.proj.bias"));  // row-parallel bias, added after the reduce-scatter
  EXPECT_TRUE(listed("final_norm.bias"));
  EXPECT_FALSE(listed("pos_embed.weight"));  // added before the sequence is split
  EXPECT_FALSE(listed("blocks.0.attn.wq.bias"));  // sharded
  EXPECT_EQ(names.size(), 2u * (4 + 2) + 2);      // per block: 2 norms × (w, b) + wo.bias + proj.bias; final norm
  c.parallel.sequence_parallel = false;
  m = initialised(c);
  EXPECT_TRUE(apply_tensor_parallel(*m, comm::make_fake_communicator(0, 2), c)->partial_gradients().empty());
}

// A rank's q/k/v and gate/up shards are column-parallel: without sequence parallelism their forward is the rank's
// block x·Wᵀ, so serving lays them side by side and runs each group as one GEMM; o and down (row-parallel, an
// all-reduce after) are never part of a group. With sequence parallelism on, the input is gathered inside the
// layer's forward: nothing is fused. A group of one computes the same logits after the layout.
TEST(TpApply, ColumnParallelShardsFuseForInference) {
  torch::NoGradGuard no_grad;
  auto c = tiny("llama", 2);
  auto m = initialised(c);
  apply_tensor_parallel(*m, comm::make_fake_communicator(1, 2), c);
  const auto n_layer = static_cast<int64_t>(m->blocks->size());
  EXPECT_EQ(model::fuse_projections(*m), 2 * n_layer);
  auto& a = *m->blocks->ptr<model::BlockImpl>(0)->attn;
  const auto qkv = model::side_by_side({a.wq.get(), a.wk.get(), a.wv.get()});
  ASSERT_TRUE(qkv.weight.defined());
  EXPECT_EQ(qkv.weight.size(0), a.wq->weight.size(0) + 2 * a.wk->weight.size(0));  // this rank's heads only
  EXPECT_FALSE(a.wo->plain_in_inference());

  c.parallel.sequence_parallel = true;
  m = initialised(c);
  apply_tensor_parallel(*m, comm::make_fake_communicator(0, 2), c);
  EXPECT_EQ(model::fuse_projections(*m), 0);

  c = tiny("llama", 1);
  m = initialised(c);
  apply_tensor_parallel(*m, comm::make_fake_communicator(0, 1), c);
  const auto tokens = at::randint(0, c.model.vocab_size, {1, 8}, at::kLong);
  const auto want = m->forward(tokens);
  EXPECT_EQ(model::fuse_projections(*m), 2 * n_layer);
  EXPECT_TRUE(at::equal(m->forward(tokens), want));
}

namespace {

// Serving with FP8 weights under tensor parallelism (docs/serving.md "FP8 weights"): the column- and row-parallel
// layers hold their blocks in FP8 and run the FP8 product between their collectives, q/k/v and gate/up side by
// side; over one rank the model computes what the same model without tensor parallelism computes in FP8.
TEST(TpApply, Fp8WeightsRunInsideTheTensorParallelLayers) {
  torch::NoGradGuard no_grad;
  auto c = tiny("llama", 1);
  auto plain = initialised(c);
  auto m = initialised(c);
  apply_tensor_parallel(*m, comm::make_fake_communicator(0, 1), c);
  const auto tokens = at::randint(0, c.model.vocab_size, {1, 8}, at::kLong);
  const auto full = m->forward(tokens);
  const int64_t layers = 7 * static_cast<int64_t>(m->blocks->size());
  EXPECT_EQ(model::hold_weights_in_fp8(*m).layers, layers);
  EXPECT_EQ(model::hold_weights_in_fp8(*plain).layers, layers);
  auto& a = *m->blocks->ptr<model::BlockImpl>(0)->attn;
  EXPECT_TRUE(a.wo->fp8_weight().defined()) << "a row-parallel layer holds FP8 too";
  EXPECT_TRUE(model::side_by_side({a.wq.get(), a.wk.get(), a.wv.get()}).fp8.defined());
  const auto got = m->forward(tokens), want = plain->forward(tokens);
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
  EXPECT_GT((got - full).abs().max().item<double>(), 1e-5) << "the FP8 products ran";
}

}  // namespace
