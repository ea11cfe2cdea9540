// serve/offline/batch_generation.h: a file's prompts fitted again to a cache sized after they were encoded
// (fit_prompts, what `meshtrain generate --input` does where the cache comes from the free device memory) —
// the same requests as encoding them against that cache in the first place, and the same refusal.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/offline/batch_generation.h"

namespace meshtrain::serve::offline {
namespace {

// A line of `n` token ids asking for `max_tokens`, or taking that as a default that may be lowered.
PromptLine ids_line(int64_t line, int32_t n, int32_t max_tokens, bool lower) {
  PromptLine p;
  p.line = line;
  p.lower_max_tokens = lower;
  for (int32_t i = 0; i < n; ++i) p.request.prompt_ids.push_back(1 + i);
  p.request.max_tokens = max_tokens;
  return p;
}

BatchLimits limits(int64_t cache_tokens) {
  return {.vocab_size = 100, .max_seq_len = 512, .cache_tokens = cache_tokens, .cache_source = "test cache"};
}

TEST(FitPrompts, GivesWhatEncodingAgainstTheCacheGives) {
  const ModelText byte_level;
  const std::vector<PromptLine> lines{ids_line(1, 10, 200, true), ids_line(2, 30, 8, false), ids_line(3, 5, 3, true)};
  auto requests = encode_prompts(lines, byte_level, "p.jsonl", limits(512));  // the model's context only
  EXPECT_EQ(requests[0].request.max_new_tokens, 200);
  fit_prompts(requests, lines, "p.jsonl", limits(64));
  const auto direct = encode_prompts(lines, byte_level, "p.jsonl", limits(64));
  ASSERT_EQ(requests.size(), direct.size());
  for (size_t i = 0; i < direct.size(); ++i) {
    EXPECT_EQ(requests[i].request.id, direct[i].request.id);
    EXPECT_EQ(requests[i].request.prompt, direct[i].request.prompt);
    EXPECT_EQ(requests[i].request.max_new_tokens, direct[i].request.max_new_tokens) << "line " << i + 1;
  }
  EXPECT_EQ(requests[0].request.max_new_tokens, 64 - 10 + 1);  // the default lowered to the cache
  EXPECT_EQ(requests[1].request.max_new_tokens, 8);            // a given max_tokens stays
  EXPECT_EQ(requests[2].request.max_new_tokens, 3);            // a default that fits stays
}

TEST(FitPrompts, ARequestTheCacheCannotHoldIsRefusedNamingItsLine) {
  const ModelText byte_level;
  const std::vector<PromptLine> lines{ids_line(1, 10, 4, false), ids_line(7, 30, 8, false)};
  auto requests = encode_prompts(lines, byte_level, "p.jsonl", limits(512));
  try {
    fit_prompts(requests, lines, "p.jsonl", limits(32));
    FAIL() << "a request of 37 positions fitted a cache of 32";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("p.jsonl:7: the prompt (30 tokens) and max_tokens (8) need 37 KV cache "
                                         "positions, the cache holds 32 (test cache)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meshtrain::serve::offline
