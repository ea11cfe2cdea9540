// training_flops_per_token (plan/training_flops.h) on a hand-counted Llama: the model count MFU uses, and the
// hardware's — frozen weights without weight gradients (LoRA), activation checkpointing's second forward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/training_flops.h"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

// llama, vocab 256, d_model 64, 4 heads of 16, 2 kv heads, d_ff 128, 2 blocks, untied, T 32. Per block the
// matmul weights are q 64·64, k 64·32, v 64·32, o 64·64, gate, up, down 128·64: 36,864; two norms of 64. The
// non-embedding parameters: 2 × (36,864 + 128) + the final norm's 64 = 74,048; the head 256 · 64 = 16,384;
// attention 2 · 2 blocks · 32 · 64 = 8,192 FLOPs a token.
Config tiny(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.family=llama", "model.vocab_size=256", "model.d_model=64", "model.n_head=4",
                                  "model.n_kv_head=2", "model.d_ff=128", "model.n_layer=2",
                                  "model.tie_embeddings=false", "data.seq_len=32"};
  all.insert(all.end(), sets.begin(), sets.end());
  Config c = parse_config("{}", "test", true, all);
  resolve(c, 1);
  return c;
}

TEST(TrainingFlops, EverythingTrainsHardwareEqualsModel) {
  const TrainingFlops f = training_flops_per_token(tiny({}));
  EXPECT_DOUBLE_EQ(f.model_per_token, 3.0 * (2 * (74048 + 16384) + 8192));  // 567,168
  EXPECT_DOUBLE_EQ(f.hardware_per_token, f.model_per_token);
}

TEST(TrainingFlops, ActivationCheckpointingRunsTheBlocksForwardAgain) {
  const TrainingFlops f = training_flops_per_token(tiny({"train.activation_checkpointing=true"}));
  EXPECT_DOUBLE_EQ(f.model_per_token, 567168);  // MFU's convention leaves recomputation out
  EXPECT_DOUBLE_EQ(f.hardware_per_token, 567168 + 2 * 74048 + 8192);
}

TEST(TrainingFlops, LoraFrozenBaseHasNoWeightGradients) {
  // Rank 4 on all seven projections: A [4, in] + B [out, 4] each, 4,096 a block, 8,192 in all (they train).
  const TrainingFlops f = training_flops_per_token(tiny({"model.lora_rank=4"}));
  EXPECT_DOUBLE_EQ(f.model_per_token, 3.0 * (2 * (74048 + 8192 + 16384) + 8192));  // 616,320
  // The frozen matmul weights — both blocks' 73,728 and the head's 16,384 — cost 4 FLOPs a parameter, not 6.
  EXPECT_DOUBLE_EQ(f.hardware_per_token, 616320 - 2 * (73728 + 16384));
}

}  // namespace
