// Stage split: contiguous blocks, the embedding on the first stage and the head on the last, balanced by
// parameter count; fixed first/last block counts; global parameter names on every stage.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/pipeline/pipeline_split.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

std::vector<int64_t> counts(const std::vector<model::ModelSpan>& spans) {
  std::vector<int64_t> out;
  for (const auto& s : spans) out.push_back(s.end_block - s.first_block);
  return out;
}

// 4 blocks of a tiny model of `family` (n_kv_head and d_ff set: the config is not resolved).
ModelConfig four_blocks(const std::string& family, bool tied) {
  return testing_support::tiny_model({.family = family, .n_layer = 4, .n_kv_head = 4,
                                      .d_ff = family == "llama" ? 64 : 128, .tie_embeddings = tied});
}

}  // namespace

TEST(PipelineSplit, EvenWithoutEmbeddingWeight) {
  auto spans = split_pipeline_stages({8, 10, 0, 0}, 4);
  EXPECT_EQ(counts(spans), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_TRUE(spans[0].embed);
  EXPECT_FALSE(spans[0].head);
  EXPECT_TRUE(spans[3].head);
  EXPECT_EQ(spans[2].first_block, 4);
}

TEST(PipelineSplit, HeavyEmbeddingAndHeadTakeBlocksOffTheEnds) {
  // Embedding and head each weigh two blocks: 14 blocks' worth over 4 stages cannot go below 4 per stage,
  // which needs the end stages to hold at most 2 blocks.
  auto spans = split_pipeline_stages({10, 1, 2, 2}, 4);
  auto c = counts(spans);
  double largest = 0;
  for (int s = 0; s < 4; ++s)
    largest = std::max(largest, c[s] * 1.0 + (s == 0 ? 2 : 0) + (s == 3 ? 2 : 0));
  EXPECT_EQ(largest, 4);
  EXPECT_LE(c[0], 2);
  EXPECT_LE(c[3], 2);
  EXPECT_EQ(c[0] + c[1] + c[2] + c[3], 10);
}

TEST(PipelineSplit, FixedFirstAndLastBlocks) {
  EXPECT_EQ(counts(split_pipeline_stages({10, 1, 0, 0}, 4, 1, 1)), (std::vector<int64_t>{1, 4, 4, 1}));
  EXPECT_EQ(counts(split_pipeline_stages({9, 1, 0, 0}, 3, 2, 0)), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_THROW(split_pipeline_stages({4, 1, 0, 0}, 4, 2, 1), Error);
}

TEST(PipelineSplit, StageModulesKeepGlobalNames) {
  const ModelConfig mc = four_blocks("llama", false);
  model::Transformer full(mc, at::TensorOptions().device(at::kMeta));
  auto spans = split_pipeline_stages(stage_sizes(*full), 2);
  model::Transformer second(mc, at::TensorOptions().device(at::kMeta), spans[1]);
  std::vector<std::string> names;
  for (const auto& it : second->named_parameters()) names.push_back(it.key());
  EXPECT_EQ(names.front(), "blocks." + std::to_string(spans[1].first_block) + ".attn_norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_FALSE(second->tok_embed);
  int64_t total = 0;
  for (const auto& s : spans) {
    model::Transformer part(mc, at::TensorOptions().device(at::kMeta), s);
    total += part->num_params();
  }
  EXPECT_EQ(total, full->num_params());  // every parameter on exactly one stage
}

// Tied embeddings: the last stage holds tok_embed.weight too (the head's copy), with the first stage's initial
// values (both from the name), no lm_head, and the split counts the copy on the head's side.
TEST(PipelineSplit, TiedEmbeddingCopyOnTheLastStage) {
  const ModelConfig mc = four_blocks("gpt2", true);
  model::Transformer full(mc, at::TensorOptions().device(at::kMeta));
  const StageSizes z = stage_sizes(*full);
  EXPECT_EQ(z.head, 64.0 * 32 + 2 * 32);  // the copy + final_norm's weight and bias
  auto spans = split_pipeline_stages(z, 2);
  model::Transformer first(mc, at::TensorOptions().device(at::kMeta), spans[0]);
  model::Transformer last(mc, at::TensorOptions().device(at::kMeta), spans[1]);
  ASSERT_TRUE(last->tok_embed);
  EXPECT_FALSE(last->lm_head);
  EXPECT_FALSE(last->pos_embed);
  first->materialize(at::kCPU, 7);
  last->materialize(at::kCPU, 7);
  EXPECT_TRUE(at::equal(first->tok_embed->weight, last->tok_embed->weight));
  EXPECT_TRUE(last->head_weight().is_same(last->tok_embed->weight));
}
