// The sampler (serve/engine/sampler.h) on fixed logit vectors: greedy, top-k = 1, a seeded row alone and inside a
// batch, repetition penalty, and the temperature / top-k / top-p distributions over a fixed number of seeded
// draws (deterministic: the same counts every run).
#include "meshtrain/serve/engine/sampler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {
namespace {

const std::vector<TokenId> kSamplerHistory = {0};

// Frequencies of each token over `n` draws (draw indices 0..n-1) of one row.
std::vector<double> sampler_frequencies(const at::Tensor& logits, const SamplingParams& p, int n) {
  std::vector<SampleRow> rows;
  for (int i = 0; i < n; ++i) rows.push_back({&p, kSamplerHistory, i});
  const auto tokens = sample_tokens(logits.unsqueeze(0).expand({n, -1}), rows);
  std::vector<double> f(static_cast<size_t>(logits.size(0)), 0.0);
  for (TokenId t : tokens) f[static_cast<size_t>(t)] += 1.0 / n;
  return f;
}

// probs (1 − ...): 0.5, 0.3, 0.15, 0.05.
at::Tensor sampler_logits() { return at::log(at::tensor(std::vector<float>{0.5f, 0.3f, 0.15f, 0.05f})); }

TEST(Sampler, GreedyIsArgmaxAndTopK1IsGreedy) {
  at::manual_seed(1);
  const auto logits = at::randn({6, 50});
  const SamplingParams greedy{.temperature = 0};
  const SamplingParams top1{.temperature = 1.3, .top_k = 1, .seed = 9};
  std::vector<SampleRow> g, k;
  for (int i = 0; i < 6; ++i) {
    g.push_back({&greedy, kSamplerHistory, i});
    k.push_back({&top1, kSamplerHistory, i});
  }
  const auto want = logits.argmax(-1);
  const auto a = sample_tokens(logits, g), b = sample_tokens(logits, k);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)], want[i].item<int64_t>());
    EXPECT_EQ(b[static_cast<size_t>(i)], want[i].item<int64_t>());
  }
}

// A seeded row draws the same token alone and in a batch of other rows with other settings.
TEST(Sampler, SeededRowIndependentOfTheBatch) {
  at::manual_seed(2);
  const auto logits = at::randn({5, 40});
  const SamplingParams mine{.temperature = 0.9, .top_k = 20, .top_p = 0.95, .seed = 1234};
  const SamplingParams others[] = {{.temperature = 0}, {.temperature = 2.0, .seed = 5},
                                   {.temperature = 0.7, .top_p = 0.5, .repetition_penalty = 1.3, .seed = 6},
                                   {.temperature = 1.0, .top_k = 3, .seed = 7}};
  const std::vector<TokenId> history = {3, 4, 5};
  for (int64_t draw = 0; draw < 20; ++draw) {
    const SampleRow alone_row{&mine, history, draw};
    const auto alone = sample_tokens(logits.narrow(0, 2, 1), std::vector<SampleRow>{alone_row});
    std::vector<SampleRow> rows = {{&others[0], history, 0}, {&others[1], history, 4}, alone_row,
                                   {&others[2], history, 1}, {&others[3], history, 2}};
    const auto batched = sample_tokens(logits, rows);
    EXPECT_EQ(alone[0], batched[2]) << "draw " << draw;
  }
  EXPECT_NE(sampling_uniform(1234, 0), sampling_uniform(1234, 1));
  EXPECT_NE(sampling_uniform(1234, 0), sampling_uniform(1235, 0));
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  const auto f = sampler_frequencies(sampler_logits(), {.temperature = 1.0, .seed = 42}, 4000);
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], 0.03) << "token " << i;
}

TEST(Sampler, LowTemperatureSharpens) {
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 over their sum 0.365.
  const auto f = sampler_frequencies(sampler_logits(), {.temperature = 0.5, .seed = 42}, 4000);
  const double want[] = {0.685, 0.247, 0.062, 0.007};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], 0.03) << "token " << i;
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  // top_k 2: tokens 0 and 1 in the ratio 5 : 3.
  auto f = sampler_frequencies(sampler_logits(), {.temperature = 1.0, .top_k = 2, .seed = 7}, 4000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.625, 0.03);
  // top_p 0.7: token 1 stays (0.5 before it), token 2 goes (0.8 before it).
  f = sampler_frequencies(sampler_logits(), {.temperature = 1.0, .top_p = 0.7, .seed = 7}, 4000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.625, 0.03);
  // top_p 0.85: token 2 stays too (0.8 before it).
  f = sampler_frequencies(sampler_logits(), {.temperature = 1.0, .top_p = 0.85, .seed = 7}, 4000);
  EXPECT_GT(f[2], 0.1);
  EXPECT_EQ(f[3], 0.0);
}

TEST(Sampler, RepetitionPenaltyDiscouragesSeenTokens) {
  const auto logits = at::tensor(std::vector<float>{2.0f, 1.9f, -1.0f, -1.05f}).view({1, -1});
  const SamplingParams off{.temperature = 0}, on{.temperature = 0, .repetition_penalty = 1.5};
  const std::vector<TokenId> seen = {0, 0, 2};
  EXPECT_EQ(sample_tokens(logits, std::vector<SampleRow>{{&off, seen, 0}})[0], 0);
  EXPECT_EQ(sample_tokens(logits, std::vector<SampleRow>{{&on, seen, 0}})[0], 1);  // 2.0 / 1.5 < 1.9
  // A negative logit is multiplied: token 2 falls below token 3 once penalised.
  const auto low = at::tensor(std::vector<float>{-3.0f, -3.0f, -1.0f, -1.05f}).view({1, -1});
  EXPECT_EQ(sample_tokens(low, std::vector<SampleRow>{{&on, seen, 0}})[0], 3);
}

TEST(Sampler, BadParamsNameTheField) {
  EXPECT_THROW(check_sampling_params(3, {.temperature = -1}), UserError);
  EXPECT_THROW(check_sampling_params(3, {.top_k = -2}), UserError);
  EXPECT_THROW(check_sampling_params(3, {.top_p = 0}), UserError);
  EXPECT_THROW(check_sampling_params(3, {.repetition_penalty = 0}), UserError);
  try {
    check_sampling_params(3, {.top_p = 1.5});
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "request 3: top_p 1.5 is not in (0, 1]");
  }
}

}  // namespace
}  // namespace meshtrain::serve
