// generate_all (serve/engine/generate_all.h): the scheduler and the engine on a tiny random model. Greedy requests
// batched over a pool small enough to preempt must produce exactly what each request produces alone with the
// model's contiguous-cache generate (model/generate.h).
#include "meshtrain/serve/engine/generate_all.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/model/generate.h"
#include "support/tiny_model.h"

namespace meshtrain::serve {
namespace {

// Untied: a tiny random GPT-2 with a tied head repeats its last token, whatever the context.
model::Transformer generate_all_model(const std::string& family) {
  model::Transformer net(testing_support::tiny_model(
      {.family = family, .vocab_size = 67, .n_head = 4, .n_kv_head = family == "llama" ? 2 : 4, .d_ff = 64,
       .max_seq_len = 32, .tie_embeddings = false}));
  net->init_weights(21);
  net->eval();
  return net;
}

// 8 requests: prompts of 3 to 17 tokens, six of them opening with one 9-token system prompt.
std::vector<GenerationRequest> generate_all_requests(const SamplingParams& sampling) {
  const std::vector<TokenId> system = {5, 17, 3, 44, 8, 61, 2, 30, 12};
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 8; ++i) {
    std::vector<TokenId> prompt;
    if (i % 4 != 3) prompt = system;
    for (int j = 0; j < 3 + (i * 5) % 9; ++j) prompt.push_back((i * 13 + j * 7) % 67);
    out.push_back({{static_cast<RequestId>(100 + i), prompt, 6 + i % 4}, sampling});
  }
  return out;
}

class GenerateAll : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateAll, GreedyBatchEqualsEachAloneDespitePreemption) {
  auto net = generate_all_model(GetParam());
  const auto requests = generate_all_requests({.temperature = 0});
  // 14 blocks of 4 tokens: two long requests fill it, so 8 at once preempt.
  GenerateOptions opts{.scheduler = {.num_blocks = 14, .block_size = 4, .max_tokens_per_step = 24, .max_running = 8}};
  SchedulerStats stats;
  const auto results = generate_all(net, requests, opts, &stats);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.prefix_hit_tokens, 0);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i].request;
    auto alone = model::generate(net, r.prompt, {.max_new_tokens = r.max_new_tokens, .temperature = 0});
    alone.erase(alone.begin(), alone.begin() + static_cast<std::ptrdiff_t>(r.prompt.size()));
    EXPECT_EQ(results[i].id, r.id);
    EXPECT_EQ(results[i].tokens, alone) << "request " << r.id;
    EXPECT_EQ(results[i].reason, FinishReason::kLength);
  }
}

// A seeded sampling request draws the same tokens alone and among others, preempted or not.
TEST_P(GenerateAll, SeededRequestSameAloneAndInABatch) {
  auto net = generate_all_model(GetParam());
  auto requests = generate_all_requests({.temperature = 0.9, .top_k = 20, .top_p = 0.9, .seed = 77});
  for (size_t i = 0; i < requests.size(); ++i) requests[i].sampling.seed = 77 + i;
  GenerateOptions opts{.scheduler = {.num_blocks = 14, .block_size = 4, .max_tokens_per_step = 24, .max_running = 8}};
  const auto batched = generate_all(net, requests, opts);
  for (size_t i : {0, 5}) {
    const auto alone = generate_all(net, {requests[i]}, opts);
    EXPECT_EQ(alone[0].tokens, batched[i].tokens) << "request " << requests[i].request.id;
  }
}

TEST_P(GenerateAll, EosStopsARequest) {
  auto net = generate_all_model(GetParam());
  const auto requests = generate_all_requests({.temperature = 0});
  GenerateOptions opts{.scheduler = {.num_blocks = 64, .block_size = 4}};
  const auto plain = generate_all(net, requests, opts);
  // The third token request 0 generates becomes its EOS: it stops there, the token kept.
  opts.eos_tokens = {plain[0].tokens[2]};
  const auto stopped = generate_all(net, requests, opts);
  const auto& want = plain[0].tokens;
  size_t first = 0;
  while (want[first] != opts.eos_tokens[0]) ++first;
  const std::vector<TokenId> until_eos(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(first) + 1);
  EXPECT_EQ(stopped[0].tokens, until_eos);
  EXPECT_EQ(stopped[0].reason, FinishReason::kStop);
}

// stop_at ends a request at the token it names (a stop string's last token), the token kept, while the others run
// to their length; on_step counts every request and every token.
TEST_P(GenerateAll, StopAtEndsARequestAndProgressCountsEveryToken) {
  auto net = generate_all_model(GetParam());
  const auto requests = generate_all_requests({.temperature = 0});
  GenerateOptions opts{.scheduler = {.num_blocks = 14, .block_size = 4, .max_tokens_per_step = 24, .max_running = 8}};
  const auto plain = generate_all(net, requests, opts);
  std::vector<size_t> seen(requests.size(), 0);
  opts.stop_at = [&](size_t i, TokenId t) {
    EXPECT_EQ(t, plain[i].tokens.at(seen[i])) << "request " << i << " token " << seen[i];  // each in order, once
    return ++seen[i] == 3 && i == 2;  // request 2 stops at its third token
  };
  std::vector<GenerateProgress> steps;
  opts.on_step = [&](const GenerateProgress& p) { steps.push_back(p); };
  const auto stopped = generate_all(net, requests, opts);
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 2) continue;
    EXPECT_EQ(stopped[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(stopped[i].reason, FinishReason::kLength);
    total += static_cast<int64_t>(stopped[i].tokens.size());
  }
  EXPECT_EQ(stopped[2].tokens, std::vector<TokenId>(plain[2].tokens.begin(), plain[2].tokens.begin() + 3));
  EXPECT_EQ(stopped[2].reason, FinishReason::kStop);
  total += 3;
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back().finished, requests.size());
  EXPECT_EQ(steps.back().total, requests.size());
  EXPECT_EQ(steps.back().generated_tokens, total);
  for (size_t s = 1; s < steps.size(); ++s) EXPECT_GE(steps[s].generated_tokens, steps[s - 1].generated_tokens);
}

TEST_P(GenerateAll, RequestLongerThanTheModelRefused) {
  auto net = generate_all_model(GetParam());
  GenerationRequest r{{1, std::vector<TokenId>(30, 4), 4}, {}};
  try {
    generate_all(net, {r}, {.scheduler = {.num_blocks = 64, .block_size = 4}});
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "request 1: the prompt (30 tokens) and max_new_tokens (4) need 33 positions, "
                           "model.max_seq_len is 32; shorten the prompt or lower max_new_tokens");
  }
  r.request.prompt = {3, 99};
  EXPECT_THROW(generate_all(net, {r}, {.scheduler = {.num_blocks = 64, .block_size = 4}}), UserError);
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateAll, ::testing::Values("llama", "gpt2"));

}  // namespace
}  // namespace meshtrain::serve
