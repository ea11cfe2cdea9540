// The KV cache's size from memory (serve/engine/paged_kv_cache.h): one block's bytes, the largest step's
// workspace and the blocks that fit, as plain arithmetic checked against numbers worked out by hand; what
// `meshtrain serve` takes on a device: the fraction's blocks, or --blocks when it fits, else one line.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {
namespace {

// Llama 3.2 1B's shape: 16 layers, 32 query heads over 8 key/value heads of 64, vocabulary 128256.
ModelConfig llama_1b() {
  ModelConfig m;
  m.n_layer = 16;
  m.n_head = 32;
  m.n_kv_head = 8;
  m.d_model = 2048;
  m.d_ff = 8192;
  m.vocab_size = 128256;
  m.max_seq_len = 8192;
  return m;
}

TEST(KvCacheSizing, BlockBytesAreKeysAndValuesOfEveryLayer) {
  // 2 (keys, values) · 16 layers · 8 heads · 64 · 16 tokens · 2 bytes (bf16) = 512 KiB.
  EXPECT_EQ(kv_block_bytes(llama_1b(), 16, 2), 524288);
  ModelConfig mha = llama_1b();
  mha.n_kv_head = 0;  // not resolved: as many key/value heads as query heads
  EXPECT_EQ(kv_block_bytes(mha, 16, 4), 524288 * 4 * 2);
}

TEST(KvCacheSizing, TensorParallelRanksHoldTheirShareOfTheHeads) {
  // 8 key/value heads over 2 ranks: each block holds 4 heads per rank, half the bytes; over 8 ranks one head.
  EXPECT_EQ(kv_block_bytes(llama_1b(), 16, 2, 2), 524288 / 2);
  EXPECT_EQ(kv_block_bytes(llama_1b(), 16, 2, 8), 524288 / 8);
}

TEST(KvCacheSizing, BlocksAreWhatTheFractionLeavesAfterTheWorkspace) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // 10 GiB free × 0.9 = 9 GiB, less 1 GiB of workspace: 8 GiB, 16384 blocks of 512 KiB; a byte less is one
  // block less (blocks are whole).
  EXPECT_EQ(kv_blocks_for_memory(10 * kGiB, 0.9, kGiB, 524288), 16384);
  EXPECT_EQ(kv_blocks_for_memory(10 * kGiB, 0.9, kGiB + 1, 524288), 16383);
  EXPECT_EQ(kv_blocks_for_memory(10 * kGiB, 1.0, 2 * kGiB, 524288), 16384);  // 8 GiB / 512 KiB
  EXPECT_EQ(kv_blocks_for_memory(kGiB, 0.5, kGiB, 524288), 0);               // the workspace takes it all
  EXPECT_EQ(kv_blocks_for_memory(524287, 1.0, 0, 524288), 0);                // less than one block
}

TEST(KvCacheSizing, WorkspaceIsTheLargestStepsActivationsAttentionAndLogits) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 64;
  m.d_ff = 128;
  m.vocab_size = 1000;
  m.max_seq_len = 128;
  // 32 tokens, 8 sampling rows, fp32 (hd = 16):
  //   one layer   32 · (4·64 + 3·128 + (4 + 2·2)·16) · 4 = 32 · 768 · 4    =  98304
  //   attention   2 · 128 · 4 · 16 · 4 + 4 · 32 · 128 · 4                  = 131072
  //   logits      8 · 1000 · (4 + 16)                                       = 160000
  EXPECT_EQ(step_workspace_bytes(m, 32, 8, 4), 98304 + 131072 + 160000);
  // A chunk never spans more than the model's context.
  EXPECT_EQ(step_workspace_bytes(m, 512, 8, 4) - step_workspace_bytes(m, 256, 8, 4), 256 * 768 * 4);
  // One of 2 tensor-parallel ranks: 2 query heads, 1 key/value head and 64 of the MLP's width; the residual
  // stream and the gathered logits whole:
  //   one layer   32 · (4·64 + 3·64 + (2 + 2·1)·16) · 4 = 32 · 512 · 4    =  65536
  //   attention   2 · 128 · 2 · 16 · 4 + 2 · 32 · 128 · 4                  =  65536
  EXPECT_EQ(step_workspace_bytes(m, 32, 8, 4, 2), 65536 + 65536 + 160000);
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(KvCacheSizing, OnADeviceTheFractionDecidesUnlessBlocksAreGiven) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  const KvCacheSize auto_size = kv_cache_size_on_device(10 * kGiB, 0.9, kGiB, 524288, std::nullopt);
  EXPECT_EQ(auto_size.num_blocks, 16384);
  EXPECT_EQ(auto_size.source, "serve.gpu_memory_fraction 0.9 of 10.00 GiB free after the weights, less 1.00 GiB of "
                              "step workspace");
  // serve.blocks is taken as given while it fits in all the free memory less the workspace (9 GiB: 18432 blocks).
  const KvCacheSize given = kv_cache_size_on_device(10 * kGiB, 0.9, kGiB, 524288, 18432);
  EXPECT_EQ(given.num_blocks, 18432);
  EXPECT_EQ(given.source, "serve.blocks");
  const std::string too_many = user_error([&] { kv_cache_size_on_device(10 * kGiB, 0.9, kGiB, 524288, 18433); });
  EXPECT_NE(too_many.find("serve.blocks 18433"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("at most 18432 blocks fit"), std::string::npos) << too_many;
  EXPECT_EQ(too_many.find('\n'), std::string::npos);
  const std::string none = user_error([&] { kv_cache_size_on_device(kGiB, 0.5, kGiB, 524288, std::nullopt); });
  EXPECT_NE(none.find("serve.gpu_memory_fraction 0.5: not one KV block"), std::string::npos) << none;
}

}  // namespace
}  // namespace meshtrain::serve
