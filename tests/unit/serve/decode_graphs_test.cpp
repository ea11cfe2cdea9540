// What of the decode graphs (serve/engine/decode_graphs.h) holds without a GPU: the batch sizes captured, the KV
// cache's scratch block past the scheduler's blocks, the engine's options from generate_all's, and the CPU running
// every step eagerly with graphs asked for; the engine's fused projections (on by default, the same greedy tokens
// as without). The graphs themselves: gpu.serve.decode_graphs.
#include "meshtrain/serve/engine/decode_graphs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "meshtrain/model/fused_projections.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "support/engine_tokens.h"
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

// Three greedy requests, on a scheduler with room for all of them.
std::map<RequestId, std::vector<TokenId>> three_greedy_requests(Engine& engine) {
  std::vector<GenerationRequest> requests;
  for (RequestId id = 1; id <= 3; ++id)
    requests.push_back({{id, {static_cast<TokenId>(id), 7, 11, 3, static_cast<TokenId>(20 + id)}, 8}, {.temperature = 0}});
  return testing_support::engine_tokens(engine, {.num_blocks = 24, .block_size = 4, .max_tokens_per_step = 32,
                                                 .max_running = 4}, requests);
}

// The engine lays out every block's q/k/v and gate/up by default, and its greedy tokens equal an engine's whose
// model stays as loaded (fp32 on the CPU).
TEST(DecodeGraphs, EngineFusesProjectionsByDefault) {
  auto fused_net = decode_graphs_model(), apart_net = decode_graphs_model();
  PagedKvCache fused_cache(*fused_net, 24, 4), apart_cache(*apart_net, 24, 4);
  Engine fused(fused_net, fused_cache, {}), apart(apart_net, apart_cache, {.fused_projections = false});
  EXPECT_EQ(fused.fused_projection_groups(), 2 * fused_net->config().n_layer);
  EXPECT_EQ(apart.fused_projection_groups(), 0);
  auto& a = *apart_net->blocks->ptr<model::BlockImpl>(0)->attn;
  EXPECT_FALSE(model::side_by_side({a.wq.get(), a.wk.get(), a.wv.get()}).weight.defined());
  const auto want = three_greedy_requests(apart);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(three_greedy_requests(fused), want);
}

}  // namespace
}  // namespace meshtrain::serve
