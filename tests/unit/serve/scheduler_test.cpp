// Scheduler: chunked prefill within the token budget, decodes first, max_running, admission by free blocks
// (first come, first served), preemption of the newest sequence and its recompute, abort, bad input.
#include "meshtrain/serve/scheduler.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "step_driver.h"

namespace meshtrain::serve {
namespace {

using testing::make_request;
using testing::run_step;

std::vector<TokenId> prompt_of(int32_t n, TokenId first = 1) {
  std::vector<TokenId> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(first + i);
  return p;
}

SchedulerOptions small_options(int32_t num_blocks, int32_t block_size, int32_t budget, int32_t max_running = 8) {
  SchedulerOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.max_tokens_per_step = budget;
  o.max_running = max_running;
  o.prefix_caching = false;
  return o;
}

void expect_chunk(const Chunk& c, RequestId id, int32_t start, int32_t n, bool samples) {
  EXPECT_EQ(c.id, id);
  EXPECT_EQ(c.start, start);
  EXPECT_EQ(c.num_tokens, n);
  EXPECT_EQ(c.samples, samples);
}

TEST(Scheduler, ChunkedPrefillAdvancesWithinTheBudget) {
  Scheduler sched(small_options(16, 4, 8));
  sched.add(make_request(1, prompt_of(20), 3));
  auto r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 1u);
  expect_chunk(r.plan.prefills[0], 1, 0, 8, false);
  r = run_step(sched);
  expect_chunk(r.plan.prefills.at(0), 1, 8, 8, false);
  r = run_step(sched);
  expect_chunk(r.plan.prefills.at(0), 1, 16, 4, true);  // the prompt's end: the first token is sampled

  sched.add(make_request(2, prompt_of(10), 2));
  r = run_step(sched);  // the decode first, then as much of the new prompt as the budget leaves
  ASSERT_EQ(r.plan.decodes.size(), 1u);
  expect_chunk(r.plan.decodes[0], 1, 20, 1, true);
  expect_chunk(r.plan.prefills.at(0), 2, 0, 7, false);
  EXPECT_EQ(r.plan.num_tokens(), 8);

  r = run_step(sched);
  expect_chunk(r.plan.decodes.at(0), 1, 21, 1, true);
  expect_chunk(r.plan.prefills.at(0), 2, 7, 3, true);
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_EQ(r.finished[0].id, 1u);
  EXPECT_EQ(r.finished[0].reason, FinishReason::kLength);

  r = run_step(sched);
  expect_chunk(r.plan.decodes.at(0), 2, 10, 1, true);
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(sched.pool().num_free(), 16);
  EXPECT_TRUE(sched.step().empty());
}

TEST(Scheduler, DecodesTakeTheBudgetFirst) {
  Scheduler sched(small_options(32, 4, 4));
  for (RequestId id = 1; id <= 6; ++id) sched.add(make_request(id, {static_cast<TokenId>(id)}, 3));
  auto r = run_step(sched);
  EXPECT_EQ(r.plan.prefills.size(), 4u);  // one token each, four of budget
  EXPECT_EQ(sched.waiting(), (std::vector<RequestId>{5, 6}));
  r = run_step(sched);
  ASSERT_EQ(r.plan.decodes.size(), 4u);  // the budget is spent on decodes: nobody joins
  EXPECT_TRUE(r.plan.prefills.empty());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.plan.decodes[i].id, i + 1);  // oldest first
  r = run_step(sched);
  EXPECT_EQ(r.finished.size(), 4u);
  r = run_step(sched);
  EXPECT_EQ(r.plan.prefills.size(), 2u);
  EXPECT_EQ(sched.running(), (std::vector<RequestId>{5, 6}));
}

TEST(Scheduler, MaxRunningCapsTheBatch) {
  Scheduler sched(small_options(32, 4, 64, 2));
  for (RequestId id = 1; id <= 3; ++id) sched.add(make_request(id, prompt_of(3), 2));
  run_step(sched);
  EXPECT_EQ(sched.running(), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(sched.waiting(), (std::vector<RequestId>{3}));
  run_step(sched);  // 1 and 2 finish
  const auto r = run_step(sched);
  EXPECT_EQ(r.plan.prefills.at(0).id, 3u);
}

TEST(Scheduler, AdmissionWaitsForFreeBlocksFirstComeFirstServed) {
  Scheduler sched(small_options(8, 4, 64));
  sched.add(make_request(1, prompt_of(20), 8));  // 5 blocks now, 7 at most
  run_step(sched);
  EXPECT_EQ(sched.pool().num_free(), 3);
  sched.add(make_request(2, prompt_of(16), 2));  // needs 4 blocks at once
  sched.add(make_request(3, prompt_of(2), 2));   // needs 1, but does not overtake request 2
  auto stop_first = [](const Sequence& s) { return SampledToken{s.request.id, 0, s.request.id == 1}; };
  auto r = run_step(sched, stop_first);
  ASSERT_EQ(r.plan.decodes.size(), 1u);
  EXPECT_TRUE(r.plan.prefills.empty());
  EXPECT_EQ(sched.waiting(), (std::vector<RequestId>{2, 3}));
  ASSERT_EQ(r.finished.size(), 1u);  // request 1 stopped (EOS): its blocks are back
  EXPECT_EQ(r.finished[0].reason, FinishReason::kStop);
  EXPECT_EQ(sched.pool().num_free(), 8);
  r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 2u);
  EXPECT_EQ(r.plan.prefills[0].id, 2u);
  EXPECT_EQ(r.plan.prefills[1].id, 3u);
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesItFirst) {
  Scheduler sched(small_options(6, 2, 64));
  for (RequestId id = 1; id <= 3; ++id) sched.add(make_request(id, prompt_of(2, 10 * static_cast<TokenId>(id)), 4));
  run_step(sched);  // three prompts, one block each
  run_step(sched);  // position 2 opens a second block each: the cache is full
  run_step(sched);
  EXPECT_EQ(sched.pool().num_free(), 0);
  sched.add(make_request(4, prompt_of(2), 1));
  auto r = run_step(sched);  // position 4: request 1 needs a block, so request 3 (the newest) gives up its two
  EXPECT_EQ(r.plan.preempted, (std::vector<RequestId>{3}));
  ASSERT_EQ(r.plan.decodes.size(), 2u);
  EXPECT_EQ(r.plan.decodes[0].id, 1u);
  EXPECT_EQ(r.plan.decodes[1].id, 2u);
  EXPECT_TRUE(r.plan.prefills.empty());  // nobody is admitted in a step that preempted
  EXPECT_EQ(r.finished.size(), 2u);      // 1 and 2 reach max_new_tokens
  const Sequence& s3 = sched.sequence(3);
  EXPECT_EQ(s3.num_computed, 0);
  EXPECT_TRUE(s3.table.blocks().empty());
  EXPECT_EQ(s3.num_preemptions, 1);
  EXPECT_EQ(s3.tokens, (std::vector<TokenId>{30, 31, 1002, 1003, 1004}));  // what it generated is kept

  EXPECT_EQ(sched.waiting(), (std::vector<RequestId>{3, 4}));  // back at the front, before a later arrival
  r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 2u);
  expect_chunk(r.plan.prefills[0], 3, 0, 5, true);  // prompt and generated tokens computed again
  EXPECT_EQ(r.plan.prefills[1].id, 4u);
  EXPECT_EQ(r.finished.size(), 2u);
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(sched.pool().num_free(), 6);
  EXPECT_EQ(sched.stats().preemptions, 1);
}

TEST(Scheduler, NothingJoinsInAStepThatPreempted) {
  Scheduler sched(small_options(6, 1, 4));      // one token per block
  sched.add(make_request(1, prompt_of(1), 5));
  sched.add(make_request(2, prompt_of(2), 4));
  run_step(sched);                              // 1 + 2 blocks
  run_step(sched);                              // 2 + 3 blocks
  const auto r = run_step(sched);  // no block for request 2's decode: it is the newest, so it preempts itself
  EXPECT_EQ(r.plan.preempted, (std::vector<RequestId>{2}));
  ASSERT_EQ(r.plan.decodes.size(), 1u);
  EXPECT_EQ(r.plan.decodes[0].id, 1u);
  // Its three blocks are free and would hold the three tokens of its recompute the budget leaves room for, but
  // taking them back at once would only preempt it again.
  EXPECT_EQ(sched.pool().num_free(), 3);
  EXPECT_TRUE(r.plan.prefills.empty());
  EXPECT_EQ(sched.waiting(), (std::vector<RequestId>{2}));
}

TEST(Scheduler, AbortFreesTheBlocks) {
  Scheduler sched(small_options(8, 4, 64));
  sched.add(make_request(1, prompt_of(9), 4));
  sched.add(make_request(2, prompt_of(9), 4));
  run_step(sched);
  EXPECT_LT(sched.pool().num_free(), 8);
  EXPECT_TRUE(sched.abort(1));
  EXPECT_TRUE(sched.abort(2));
  EXPECT_FALSE(sched.abort(2));
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(sched.pool().num_free(), 8);
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no UserError";
}

TEST(Scheduler, RejectsBadOptionsAndRequestsInOneLine) {
  EXPECT_NE(user_error_of([] { Scheduler(small_options(8, 4, 0)); }).find("max_tokens_per_step"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { Scheduler(small_options(8, 4, 8, 0)); }).find("max_running"), std::string::npos);
  EXPECT_NE(user_error_of([] { Scheduler(small_options(8, -1, 8)); }).find("block_size"), std::string::npos);
  Scheduler sched(small_options(8, 4, 64));
  EXPECT_NE(user_error_of([&] { sched.add(make_request(1, {}, 4)); }).find("request 1: the prompt is empty"),
            std::string::npos);
  EXPECT_NE(user_error_of([&] { sched.add(make_request(1, {5}, 0)); }).find("max_new_tokens must be at least 1"),
            std::string::npos);
  EXPECT_EQ(user_error_of([&] { sched.add(make_request(1, prompt_of(30), 4)); }),
            "request 1: the prompt (30 tokens) and max_new_tokens (4) need 9 KV blocks of 4 tokens, the cache "
            "has 8; shorten the prompt or lower max_new_tokens");
  sched.add(make_request(1, prompt_of(29), 4));  // 32 tokens in the cache at most: fits exactly
  EXPECT_NE(user_error_of([&] { sched.add(make_request(1, {5}, 1)); }).find("in use"), std::string::npos);
  EXPECT_TRUE(sched.has_work());
}

TEST(Scheduler, InsistsOnTokensBetweenSteps) {
  Scheduler sched(small_options(8, 4, 64));
  sched.add(make_request(1, prompt_of(3), 4));
  sched.step();
  EXPECT_THROW(sched.step(), Error);
  EXPECT_THROW(sched.abort(1), Error);
  EXPECT_THROW(sched.on_tokens({}), Error);  // the chunk sampled, the token is missing
  const SampledToken wrong{7, 0, false};
  EXPECT_THROW(sched.on_tokens({&wrong, 1}), Error);
}

}  // namespace
}  // namespace meshtrain::serve
