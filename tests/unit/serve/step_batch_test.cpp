// make_step_batch: a plan of one decode and one prefill chunk made into the model's ragged batch, with the
// tensors the decode kernel reads (int32 block tables and context lengths) and the count of leading decodes.
#include "meshtrain/serve/engine/step_batch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "step_driver.h"

namespace meshtrain::serve {
namespace {

TEST(StepBatch, DecodesFirstWithInt32TablesAndLengths) {
  SchedulerOptions o;
  o.num_blocks = 16;
  o.block_size = 4;
  o.max_tokens_per_step = 64;
  o.prefix_caching = false;
  Scheduler sched(o);
  sched.add(testing::make_request(1, {1, 2, 3, 4, 5, 6}, 5));
  testing::run_step(sched);  // request 1's prompt: 6 tokens in 2 blocks, one token sampled
  sched.add(testing::make_request(2, {7, 8, 9}, 5));
  const StepPlan plan = sched.step();  // request 1 decodes position 6; request 2 prefills positions 0-2
  ASSERT_EQ(plan.decodes.size(), 1u);
  ASSERT_EQ(plan.prefills.size(), 1u);

  const StepBatch sb = make_step_batch(plan, sched, at::kCPU);
  const model::PagedBatch& b = sb.batch;
  EXPECT_EQ(b.num_decodes, 1);
  ASSERT_EQ(b.chunks.size(), 2u);
  EXPECT_EQ(b.chunks[0].query_start, 0);
  EXPECT_EQ(b.chunks[0].num_tokens, 1);
  EXPECT_EQ(b.chunks[0].context_len, 7);
  EXPECT_EQ(b.chunks[1].query_start, 1);
  EXPECT_EQ(b.chunks[1].num_tokens, 3);
  EXPECT_EQ(b.chunks[1].context_len, 3);
  ASSERT_EQ(b.context_lens.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(b.context_lens, at::tensor({7, 3}, at::kInt)));
  // Rows as wide as the longest table (request 1: 2 blocks), the shorter padded with block 0.
  ASSERT_EQ(b.block_tables.scalar_type(), at::kInt);
  ASSERT_EQ(b.block_tables.sizes(), (at::IntArrayRef{2, 2}));
  const auto& first = sched.sequence(1).table.blocks();
  const auto& second = sched.sequence(2).table.blocks();
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_TRUE(at::equal(b.block_tables, at::tensor({first[0], first[1], second[0], 0}, at::kInt).view({2, 2})));
  EXPECT_TRUE(at::equal(b.positions, at::tensor(std::vector<int64_t>{6, 0, 1, 2})));
}

}  // namespace
}  // namespace meshtrain::serve
