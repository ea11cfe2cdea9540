// pack_step / unpack_step: a step's plan as the one int32 array rank 0 broadcasts under tensor parallelism, and the
// batch every rank makes of it — exactly make_step_batch's for the same plan.
#include "meshtrain/serve/engine/packed_step.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "meshtrain/serve/engine/step_batch.h"
#include "step_driver.h"

namespace meshtrain::serve {
namespace {

void expect_same_batch(const model::PagedBatch& a, const model::PagedBatch& b) {
  const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
      {a.tokens, b.tokens},           {a.positions, b.positions},     {a.slots, b.slots},
      {a.block_tables, b.block_tables}, {a.sample_rows, b.sample_rows}, {a.context_lens, b.context_lens}};
  for (const auto& [x, y] : pairs) {
    EXPECT_EQ(x.scalar_type(), y.scalar_type());
    EXPECT_EQ(x.sizes(), y.sizes());
    EXPECT_TRUE(at::equal(x, y)) << x << "\nvs\n" << y;
  }
  EXPECT_EQ(a.num_decodes, b.num_decodes);
  // The prefill chunks' index (flash's variable-length kernel), present exactly when there are prefill chunks.
  EXPECT_EQ(a.prefill_context_slots.defined(), b.prefill_context_slots.defined());
  if (a.prefill_context_slots.defined() && b.prefill_context_slots.defined()) {
    for (const auto& [x, y] : std::vector<std::pair<at::Tensor, at::Tensor>>{
             {a.prefill_context_slots, b.prefill_context_slots},
             {a.prefill_cu_queries, b.prefill_cu_queries},
             {a.prefill_cu_contexts, b.prefill_cu_contexts}})
      EXPECT_TRUE(x.scalar_type() == y.scalar_type() && at::equal(x, y)) << x << "\nvs\n" << y;
    EXPECT_EQ(a.prefill_max_queries, b.prefill_max_queries);
    EXPECT_EQ(a.prefill_max_context, b.prefill_max_context);
  }
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (size_t c = 0; c < a.chunks.size(); ++c) {
    EXPECT_EQ(a.chunks[c].query_start, b.chunks[c].query_start);
    EXPECT_EQ(a.chunks[c].num_tokens, b.chunks[c].num_tokens);
    EXPECT_EQ(a.chunks[c].context_len, b.chunks[c].context_len);
  }
}

// Two decodes (one across a block boundary, tables of different widths), a prefill chunk that stops short of its
// prompt's end (no sampling row) and one that samples: every step packs, unpacks to make_step_batch's batch.
TEST(PackedStep, RoundTripIsMakeStepBatch) {
  SchedulerOptions o{.num_blocks = 32, .block_size = 4, .max_tokens_per_step = 12, .max_running = 8,
                     .prefix_caching = false};
  Scheduler sched(o);
  sched.add(testing::make_request(1, {1, 2, 3, 4, 5, 6, 7}, 6));
  sched.add(testing::make_request(2, {8, 9, 10}, 6));
  sched.add(testing::make_request(3, std::vector<TokenId>(20, 11), 3));
  int steps = 0, with_decodes_and_prefills = 0;
  while (sched.has_work()) {
    const StepPlan plan = sched.step();
    const PackedStep packed = pack_step(plan, sched);
    const StepBatch made = make_step_batch(plan, sched, at::kCPU);
    const model::PagedBatch unpacked = unpack_step(packed.data, at::kCPU);
    expect_same_batch(unpacked, made.batch);
    EXPECT_EQ(packed.sampling, made.sampling);
    // 6 counts, 3 ints per token and per chunk, a table row per chunk, one int per sampling row.
    const auto C = static_cast<int64_t>(made.batch.chunks.size());
    EXPECT_EQ(static_cast<int64_t>(packed.data.size()),
              6 + 3 * made.batch.tokens.numel() + 3 * C + made.batch.block_tables.numel() +
                  made.batch.sample_rows.numel());
    EXPECT_EQ(static_cast<int64_t>(packed.data.size()),
              packed_step_size(made.batch.tokens.numel(), C, made.batch.sample_rows.numel(),
                               made.batch.block_tables.size(1)));
    with_decodes_and_prefills += !plan.decodes.empty() && !plan.prefills.empty();
    std::vector<SampledToken> sampled;
    for (const Sequence* s : made.sampling) sampled.push_back({s->request.id, 100 + s->num_tokens(), false});
    sched.on_tokens(sampled);
    ++steps;
  }
  EXPECT_GT(steps, 5);
  EXPECT_GT(with_decodes_and_prefills, 0);
}

TEST(PackedStep, LayoutOfOneDecode) {
  Scheduler sched({.num_blocks = 8, .block_size = 2, .max_tokens_per_step = 16, .max_running = 4,
                   .prefix_caching = false});
  sched.add(testing::make_request(7, {5, 6, 7}, 4));
  testing::run_step(sched);  // the prompt in blocks b0, b1; token 1003 sampled
  const StepPlan plan = sched.step();
  ASSERT_EQ(plan.decodes.size(), 1u);
  const auto& blocks = sched.sequence(7).table.blocks();
  ASSERT_EQ(blocks.size(), 2u);
  const int32_t slot = blocks[1] * 2 + 1;  // position 3: block 1, offset 1
  const std::vector<int32_t> want = {1, 1, 1, 1, 2, 2,  // N, C, S, decodes, B, block size
                                     1003, 3, slot,  // token, position, slot
                                     0, 1, 4,        // query start, tokens, context length
                                     blocks[0], blocks[1], 0};  // table row, sample row
  EXPECT_EQ(pack_step(plan, sched).data, want);
}

TEST(PackedStep, SizesThatDoNotAddUpAreRefused) {
  Scheduler sched({.num_blocks = 8, .block_size = 2, .max_tokens_per_step = 16, .max_running = 4});
  sched.add(testing::make_request(1, {5, 6, 7}, 4));
  std::vector<int32_t> data = pack_step(sched.step(), sched).data;
  data.pop_back();
  EXPECT_THROW(unpack_step(data, at::kCPU), Error);
  EXPECT_THROW(unpack_step(std::vector<int32_t>{1, 2}, at::kCPU), Error);
}

}  // namespace
}  // namespace meshtrain::serve
