// What of the decode graphs (serve/engine/decode_graphs.h) holds without a GPU: the batch sizes captured, the KV
// cache's scratch block past the scheduler's blocks, the engine's options from generate_all's, and the CPU running
// every step eagerly with graphs asked for. The graphs themselves: gpu.serve.decode_graphs.
#include "meshtrain/serve/engine/decode_graphs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "support/tiny_model.h"

namespace meshtrain::serve {
namespace {

model::Transformer decode_graphs_model() {
  model::Transformer net(testing_support::tiny_model({.family = "llama", .vocab_size = 67, .n_kv_head = 2, .d_ff = 64,
                                                      .max_seq_len = 32, .tie_embeddings = false}));
  net->init_weights(5);
  net->eval();
  return net;
}

TEST(DecodeGraphBatchSizes, PowersOfTwoUpToMaxRunning) {
  EXPECT_EQ(decode_graph_batch_sizes(1), std::vector<int64_t>({1}));
  EXPECT_EQ(decode_graph_batch_sizes(2), std::vector<int64_t>({1, 2}));
  EXPECT_EQ(decode_graph_batch_sizes(16), std::vector<int64_t>({1, 2, 4, 8, 16}));
  EXPECT_EQ(decode_graph_batch_sizes(24), std::vector<int64_t>({1, 2, 4, 8, 16, 24}));
}

TEST(DecodeGraphs, CacheHasAScratchBlockPastTheSchedulers) {
  auto net = decode_graphs_model();
  PagedKvCache cache(*net, 6, 4);
  EXPECT_EQ(cache.num_blocks(), 6);
  EXPECT_EQ(cache.scratch_block(), 6);
  for (const auto& l : cache.layers()) {
    EXPECT_EQ(l.k.size(0), 7);
    EXPECT_EQ(l.v.size(0), 7);
  }
}

TEST(DecodeGraphs, EngineOptionsFollowGenerateOptions) {
  GenerateOptions g{.scheduler = {.max_running = 24}, .eos_tokens = {2, 9}, .cuda_graphs = false};
  const EngineOptions e = engine_options(g);
  EXPECT_EQ(e.eos_tokens, std::vector<TokenId>({2, 9}));
  EXPECT_FALSE(e.cuda_graphs);
  EXPECT_EQ(e.cuda_graph_batch_sizes, std::vector<int64_t>({1, 2, 4, 8, 16, 24}));
  EXPECT_TRUE(engine_options(GenerateOptions{}).cuda_graphs);  // on by default
}

TEST(DecodeGraphs, CpuRunsEveryStepEagerly) {
  auto net = decode_graphs_model();
  PagedKvCache cache(*net, 6, 4);
  EXPECT_FALSE(DecodeGraphs::supported(*net, cache));
  Engine engine(net, cache, {.cuda_graphs = true});
  EXPECT_EQ(engine.graphs(), nullptr);
}

}  // namespace
}  // namespace meshtrain::serve
