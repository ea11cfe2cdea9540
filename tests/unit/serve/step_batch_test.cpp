// make_step_batch: a plan of one decode and one prefill chunk made into the model's ragged batch, with the
// tensors the decode kernel reads (int32 block tables and context lengths) and the count of leading decodes; a
// decode-only plan made into a graph's host rows (make_decode_rows) holds what its step batch holds.
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

// Three sequences decoding, one past a block boundary: each host row is its step-batch row — token, position,
// slot, context length and block-table row — in the same order; a plan with a prefill chunk makes no rows.
TEST(StepBatch, DecodeRowsHoldWhatTheStepBatchHolds) {
  SchedulerOptions o{.num_blocks = 16, .block_size = 4, .max_tokens_per_step = 64, .prefix_caching = false};
  Scheduler sched(o);
  sched.add(testing::make_request(1, {1, 2, 3, 4, 5, 6, 7, 8}, 5));
  sched.add(testing::make_request(2, {9, 10}, 5));
  sched.add(testing::make_request(3, {11, 12, 13, 14, 15}, 5));
  testing::run_step(sched);  // every prompt, one token sampled each
  const StepPlan plan = sched.step();
  ASSERT_EQ(plan.decodes.size(), 3u);
  ASSERT_TRUE(plan.prefills.empty());
  std::vector<DecodeRow> rows;
  std::vector<const Sequence*> seqs;
  ASSERT_TRUE(make_decode_rows(plan, sched, rows, seqs));
  const StepBatch sb = make_step_batch(plan, sched, at::kCPU);
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(seqs, sb.sampling);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto r = static_cast<int64_t>(i);
    EXPECT_EQ(rows[i].token, sb.batch.tokens[r].item<int64_t>()) << "row " << i;
    EXPECT_EQ(rows[i].position, sb.batch.positions[r].item<int64_t>()) << "row " << i;
    EXPECT_EQ(rows[i].slot, sb.batch.slots[r].item<int64_t>()) << "row " << i;
    EXPECT_EQ(rows[i].context_len, sb.batch.context_lens[r].item<int32_t>()) << "row " << i;
    const auto table = sb.batch.block_tables[r].narrow(0, 0, static_cast<int64_t>(rows[i].blocks.size()));
    EXPECT_TRUE(at::equal(table, at::tensor(std::vector<int32_t>(rows[i].blocks.begin(), rows[i].blocks.end()))))
        << "row " << i;
  }
  EXPECT_EQ(rows[0].context_len, 9) << "request 1 decodes position 8, the first of its third block";
  EXPECT_EQ(rows[0].blocks.size(), 3u);

  std::vector<SampledToken> sampled;
  for (const Sequence* q : seqs) sampled.push_back(testing::sample_counting(*q));
  sched.on_tokens(sampled);
  sched.add(testing::make_request(4, {16, 17, 18}, 5));
  const StepPlan mixed = sched.step();  // three decodes and request 4's prompt
  ASSERT_FALSE(mixed.prefills.empty());
  EXPECT_FALSE(make_decode_rows(mixed, sched, rows, seqs));
  EXPECT_TRUE(rows.empty() && seqs.empty());
}

}  // namespace
}  // namespace meshtrain::serve
