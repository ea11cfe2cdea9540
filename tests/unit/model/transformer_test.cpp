#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>

#include "meshtrain/model/generate.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

ModelConfig tiny(const std::string& family) {
  return testing_support::tiny_model({.family = family, .n_kv_head = 4, .d_ff = family == "gpt2" ? 128 : 96,
                                      .tie_embeddings = true, .rope_theta = 10000});
}

}  // namespace

TEST(Transformer, ParameterNamesAndCountsPerFamily) {
  auto g = tiny("gpt2");
  model::Transformer gpt(g);
  auto names = gpt->named_parameters().keys();
  EXPECT_NE(std::find(names.begin(), names.end(), "pos_embed.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.mlp.fc.bias"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());  // tied
  // embed 64·32 + pos 16·32 + 2 × (ln 2·32·2 + attn 4·(32·32+32) + mlp 32·128+128 + 128·32+32) + final ln 64
  const int64_t block = 2 * 2 * 32 + 4 * (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32);
  EXPECT_EQ(gpt->num_params(), 64 * 32 + 16 * 32 + 2 * block + 2 * 32);

  auto l = tiny("llama");
  l.n_kv_head = 2;
  l.tie_embeddings = false;
  model::Transformer llama(l);
  names = llama->named_parameters().keys();
  EXPECT_NE(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.0.mlp.w3.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "pos_embed.weight"), names.end());
  EXPECT_EQ(llama->blocks[0]->as<model::BlockImpl>()->attn->wk->weight.size(0), 2 * 8);  // GQA: 2 kv heads × hd 8
}

TEST(Transformer, ForwardShapesAndInitialLossNearUniform) {
  for (auto family : {"gpt2", "llama"}) {
    at::manual_seed(0);
    model::Transformer net(tiny(family));
    net->init_weights(1);
    auto x = at::randint(0, 64, {3, 16}, at::kLong);
    auto logits = net->forward(x);
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 16, 64}));
    const double loss = net->loss(x, at::randint(0, 64, {3, 16}, at::kLong)).item<double>();
    EXPECT_NEAR(loss, std::log(64.0), 0.3) << family;
  }
}

TEST(Transformer, CausalFutureTokensDoNotChangePastLogits) {
  for (auto family : {"gpt2", "llama"}) {
    at::manual_seed(1);
    model::Transformer net(tiny(family));
    net->init_weights(2);
    net->eval();
    auto a = at::randint(0, 64, {1, 12}, at::kLong);
    auto b = a.clone();
    b.index_put_({0, 11}, (a.index({0, 11}) + 1) % 64);
    auto la = net->forward(a), lb = net->forward(b);
    EXPECT_TRUE(at::allclose(la.narrow(1, 0, 11), lb.narrow(1, 0, 11), 1e-5, 1e-6)) << family;
    EXPECT_FALSE(at::allclose(la.narrow(1, 11, 1), lb.narrow(1, 11, 1), 1e-5, 1e-6)) << family;
  }
}

TEST(Transformer, KVCacheDecodingMatchesFullForward) {
  for (auto family : {"gpt2", "llama"}) {
    at::manual_seed(2);
    auto cfg = tiny(family);
    cfg.n_kv_head = 2;
    model::Transformer net(cfg);
    net->init_weights(3);
    net->eval();
    torch::NoGradGuard ng;
    auto x = at::randint(0, 64, {1, 10}, at::kLong);
    auto full = net->forward(x);
    auto cache = net->make_cache();
    auto pre = net->forward(x.narrow(1, 0, 6), &cache);
    EXPECT_TRUE(at::allclose(pre, full.narrow(1, 0, 6), 1e-5, 1e-5)) << family;
    for (int64_t t = 6; t < 10; ++t) {
      auto step = net->forward(x.narrow(1, t, 1), &cache);
      EXPECT_TRUE(at::allclose(step.squeeze(1), full.select(1, t), 1e-4, 1e-5)) << family << " t=" << t;
    }
    EXPECT_EQ(cache.length(), 10);
  }
}

TEST(Transformer, InitIsDeterministicFromSeedAndScalesResidualProjections) {
  auto cfg = tiny("gpt2");
  cfg.n_layer = 8;
  cfg.d_model = 256;
  cfg.d_ff = 1024;
  at::manual_seed(7);
  model::Transformer a(cfg);
  a->init_weights(7);
  at::manual_seed(8);  // the global generator plays no part
  model::Transformer b(cfg);
  b->init_weights(7);
  for (const auto& item : a->named_parameters())
    EXPECT_TRUE(at::equal(item.value(), b->named_parameters()[item.key()])) << item.key();
  auto blk = a->blocks[0]->as<model::BlockImpl>();
  EXPECT_NEAR(blk->attn->wq->weight.std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(blk->attn->wo->weight.std().item<double>(), 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_TRUE(at::equal(blk->attn->wq->bias, at::zeros_like(blk->attn->wq->bias)));
}

TEST(Generate, GreedyIsDeterministicAndStopsAtMaxSeqLen) {
  at::manual_seed(3);
  model::Transformer net(tiny("llama"));
  net->init_weights(6);
  auto a = model::generate(net, {1, 2, 3}, {.max_new_tokens = 5, .temperature = 0});
  auto b = model::generate(net, {1, 2, 3}, {.max_new_tokens = 5, .temperature = 0});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 8u);
  auto c = model::generate(net, {1, 2, 3}, {.max_new_tokens = 100, .temperature = 1.0, .top_k = 5});
  EXPECT_EQ(c.size(), 16u);  // max_seq_len
  for (auto t : c) EXPECT_LT(t, 64);
}

TEST(Generate, StreamsEachTokenAndStopsAtAStopToken) {
  at::manual_seed(3);
  model::Transformer net(tiny("llama"));
  net->init_weights(6);
  const auto full = model::generate(net, {1, 2, 3}, {.max_new_tokens = 5, .temperature = 0});
  std::vector<int64_t> streamed;
  model::SampleOptions opts{.max_new_tokens = 5, .temperature = 0};
  opts.on_token = [&](int64_t t) { streamed.push_back(t); };
  EXPECT_EQ(model::generate(net, {1, 2, 3}, opts), full);
  EXPECT_EQ(streamed, std::vector<int64_t>(full.begin() + 3, full.end()));
  // Stopping at the second sampled token: it is returned, nothing after it.
  opts.stop_tokens = {full[4]};
  streamed.clear();
  const auto stopped = model::generate(net, {1, 2, 3}, opts);
  const size_t first = static_cast<size_t>(std::find(full.begin() + 3, full.end(), full[4]) - full.begin());
  EXPECT_EQ(stopped, std::vector<int64_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  EXPECT_EQ(streamed.size(), stopped.size() - 3);
}
