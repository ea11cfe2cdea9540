// copy_model_shape / gives_model_shape (core/model_shape.h): which model keys are the shape a source can give.
#include <gtest/gtest.h>

#include "meshtrain/core/config.h"
#include "meshtrain/core/model_shape.h"

namespace meshtrain {
namespace {

TEST(ModelShape, ATrainingOnlyModelSectionGivesNoShape) {
  Config c = parse_config("model:\n  lora_rank: 8\n  lora_alpha: 32\n  dropout: 0.1\n  lora_targets: [q, v]\n",
                          "t.yaml", false);
  EXPECT_FALSE(gives_model_shape(c.model));
  EXPECT_FALSE(gives_model_shape(ModelConfig{}));
}

TEST(ModelShape, APresetOrAnyShapeKeyGivesOne) {
  for (const char* text : {"model:\n  preset: tiny\n", "model:\n  family: llama\n", "model:\n  vocab_size: 300\n",
                           "model:\n  rope_theta: 10000\n", "model:\n  eos_token_id: 2\n",
                           "model:\n  tie_embeddings: false\n"})
    EXPECT_TRUE(gives_model_shape(parse_config(text, "t.yaml", false).model)) << text;
}

TEST(ModelShape, CopyTakesTheShapeAndKeepsTheTrainingKeys) {
  ModelConfig source, run;
  apply_model_preset("llama3.2-1b", source);
  source.lora_rank = 2;  // not part of the shape: the run's own stays
  run.lora_rank = 16;
  run.dropout = 0.05;
  copy_model_shape(source, run);
  EXPECT_EQ(run.family, Family::llama);
  EXPECT_EQ(run.d_model, source.d_model);
  EXPECT_EQ(run.vocab_size, source.vocab_size);
  EXPECT_EQ(run.tie_embeddings, source.tie_embeddings);
  EXPECT_EQ(run.lora_rank, 16);
  EXPECT_EQ(run.dropout, 0.05);
  EXPECT_TRUE(gives_model_shape(run));
}

}  // namespace
}  // namespace meshtrain
