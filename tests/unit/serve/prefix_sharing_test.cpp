// Prefix sharing through the scheduler: a common system prompt's full blocks are computed once and shared, the
// partial block after it never is, blocks outlive their sequence until evicted, and eviction takes a freed
// sequence's tail before its head.
#include <gtest/gtest.h>

#include <vector>

#include "meshtrain/serve/scheduler.h"
#include "step_driver.h"

namespace meshtrain::serve {
namespace {

using testing::make_request;
using testing::run_step;

// Three full blocks of four tokens.
std::vector<TokenId> system_prompt() { return {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; }

std::vector<TokenId> with_tail(std::vector<TokenId> head, std::initializer_list<TokenId> tail) {
  head.insert(head.end(), tail);
  return head;
}

SchedulerOptions sharing_options(int32_t num_blocks) {
  SchedulerOptions o;
  o.num_blocks = num_blocks;
  o.block_size = 4;
  o.max_tokens_per_step = 64;
  o.max_running = 8;
  return o;
}

TEST(PrefixSharing, TwoRequestsWithOneSystemPromptShareItsThreeBlocks) {
  Scheduler sched(sharing_options(32));
  sched.add(make_request(1, with_tail(system_prompt(), {100, 101}), 4));
  run_step(sched);  // A's prompt computed: its three full blocks are published, the fourth holds two tokens
  EXPECT_EQ(sched.pool().num_published(), 3);

  sched.add(make_request(2, with_tail(system_prompt(), {200, 201, 202}), 4));
  sched.add(make_request(3, with_tail(system_prompt(), {100, 101}), 4));  // A's prompt again
  const auto r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 2u);
  EXPECT_EQ(r.plan.prefills[0].start, 12);  // only the tail is computed
  EXPECT_EQ(r.plan.prefills[0].num_tokens, 3);
  EXPECT_EQ(r.plan.prefills[1].start, 12);
  EXPECT_EQ(sched.stats().prefix_hit_tokens, 24);

  const auto& a = sched.sequence(1).table.blocks();
  const auto& b = sched.sequence(2).table.blocks();
  const auto& c = sched.sequence(3).table.blocks();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i], a[i]);
    EXPECT_EQ(c[i], a[i]);
    EXPECT_EQ(sched.pool().ref_count(a[i]), 3);
  }
  // The fourth block was partial when C arrived: not published, so C has its own, as does B.
  EXPECT_NE(c[3], a[3]);
  EXPECT_NE(b[3], a[3]);
  EXPECT_EQ(sched.pool().ref_count(a[3]), 1);
  EXPECT_EQ(sched.pool().num_free(), 32 - 6);
}

TEST(PrefixSharing, ThePromptsLastTokenIsAlwaysComputed) {
  Scheduler sched(sharing_options(32));
  sched.add(make_request(1, with_tail(system_prompt(), {100}), 4));
  run_step(sched);
  sched.add(make_request(2, system_prompt(), 4));  // all three blocks published, but its logits are needed
  const auto r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 1u);
  EXPECT_EQ(r.plan.prefills[0].start, 8);
  EXPECT_EQ(r.plan.prefills[0].num_tokens, 4);
  EXPECT_TRUE(r.plan.prefills[0].samples);
  EXPECT_EQ(sched.sequence(2).table.blocks()[1], sched.sequence(1).table.blocks()[1]);
  EXPECT_NE(sched.sequence(2).table.blocks()[2], sched.sequence(1).table.blocks()[2]);
}

TEST(PrefixSharing, FreedBlocksStayCachedUntilEvictedTailFirst) {
  Scheduler sched(sharing_options(5));
  sched.add(make_request(1, with_tail(system_prompt(), {100}), 1));
  const auto a = run_step(sched);
  ASSERT_EQ(a.finished.size(), 1u);  // one token: done after its prefill
  EXPECT_EQ(sched.pool().num_free(), 5);
  EXPECT_EQ(sched.pool().num_published(), 3);  // the system prompt outlives its sequence

  // Four new blocks: A's unpublished last block, the never-used one, then A's published blocks from its tail:
  // the system prompt's third and second. Its first stays cached.
  sched.add(make_request(2, {50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65}, 1));
  run_step(sched);
  EXPECT_EQ(sched.stats().prefix_hit_tokens, 0);

  sched.add(make_request(3, with_tail(system_prompt(), {9}), 1));
  const auto c = run_step(sched);
  ASSERT_EQ(c.plan.prefills.size(), 1u);
  EXPECT_EQ(c.plan.prefills[0].start, 4);  // the system prompt's first block survived, its second did not
  EXPECT_EQ(sched.stats().prefix_hit_tokens, 4);
}

TEST(PrefixSharing, OffComputesEveryToken) {
  SchedulerOptions o = sharing_options(32);
  o.prefix_caching = false;
  Scheduler sched(o);
  sched.add(make_request(1, with_tail(system_prompt(), {100}), 4));
  run_step(sched);
  sched.add(make_request(2, with_tail(system_prompt(), {100}), 4));
  const auto r = run_step(sched);
  ASSERT_EQ(r.plan.prefills.size(), 1u);
  EXPECT_EQ(r.plan.prefills[0].start, 0);
  EXPECT_EQ(sched.pool().num_published(), 0);
  EXPECT_EQ(sched.stats().prefix_hit_tokens, 0);
}

}  // namespace
}  // namespace meshtrain::serve
