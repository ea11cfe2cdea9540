// EngineLoop (serve/engine/engine_loop.h): greedy requests submitted from several threads at once, over a cache
// small enough to preempt, stream exactly the tokens generate_all gives the same requests; a request the
// scheduler refuses ends its stream with a `rejected` one-line error; a cancelled one ends and frees its blocks;
// drain() refuses new requests while the queued and running ones finish, and wait_idle() sees them all end;
// stop() ends the streams still open and counts them.
#include "meshtrain/serve/engine/engine_loop.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "stream_reader.h"
#include "support/tiny_model.h"

namespace meshtrain::serve {
namespace {

model::Transformer engine_loop_model() {
  model::Transformer net(testing_support::tiny_model(
      {.family = "llama", .vocab_size = 67, .n_head = 4, .n_kv_head = 2, .d_ff = 64, .max_seq_len = 32,
       .tie_embeddings = false}));
  net->init_weights(5);
  net->eval();
  return net;
}

using testing::read_to_end;

TEST(EngineLoop, ConcurrentSubmissionsStreamWhatGenerateAllGives) {
  auto net = engine_loop_model();
  const GenerateOptions opts{.scheduler = {.num_blocks = 12, .block_size = 4, .max_tokens_per_step = 16,
                                           .max_running = 4}};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> prompt;
    for (int j = 0; j < 4 + i; ++j) prompt.push_back((i * 11 + j * 5) % 67);
    requests.push_back({{static_cast<RequestId>(i + 1), prompt, 8}, {.temperature = 0}});
  }
  const auto want = generate_all(net, requests, opts);
  EngineLoop loop(net, opts);
  std::vector<std::vector<TokenId>> got(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      auto s = loop.submit(requests[i].request.prompt, requests[i].request.max_new_tokens, requests[i].sampling);
      auto [tokens, end] = read_to_end(*s);
      EXPECT_TRUE(end.error.empty()) << end.error;
      EXPECT_EQ(*end.finish, FinishReason::kLength);
      got[i] = tokens;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i], want[i].tokens) << "request " << i;
  const EngineLoopMetrics m = loop.metrics();
  EXPECT_EQ(m.generated_tokens, 6 * 8);
  EXPECT_EQ(m.requests_finished, 6);
  EXPECT_EQ(m.blocks_free, 12);
  // Every step timed once; each token through the model counted: the prompts less what the cache gave, and
  // every generated token but each request's last (sampled, never fed back); a preempted request's context again
  // (the arrival order, and so the preemptions, is the threads').
  EXPECT_EQ(m.step_time.count(), m.steps);
  EXPECT_GT(m.steps, 0);
  const int64_t once = m.prompt_tokens + 6 * (8 - 1);
  EXPECT_GE(m.computed_tokens + m.prefix_hit_tokens, once) << m.computed_tokens;
  if (m.preemptions == 0) {
    EXPECT_EQ(m.computed_tokens + m.prefix_hit_tokens, once) << m.computed_tokens;
  }
  EXPECT_GE(m.generation_tokens_per_second, 0.0);
}

TEST(EngineLoop, RefusedRequestEndsItsStreamWithOneLine) {
  EngineLoop loop(engine_loop_model(), {.scheduler = {.num_blocks = 4, .block_size = 4}});
  auto s = loop.submit(std::vector<TokenId>(20, 3), 4, {});
  auto [tokens, end] = read_to_end(*s);
  EXPECT_TRUE(tokens.empty());
  EXPECT_TRUE(end.rejected);
  EXPECT_NE(end.error.find("KV blocks"), std::string::npos) << end.error;
  EXPECT_EQ(end.error.find('\n'), std::string::npos);
  // The loop goes on serving.
  auto ok = loop.submit({1, 2, 3}, 2, {.temperature = 0});
  EXPECT_EQ(read_to_end(*ok).first.size(), 2u);
}

TEST(EngineLoop, CancelledRequestEndsAndFreesItsBlocks) {
  EngineLoop loop(engine_loop_model(), {.scheduler = {.num_blocks = 16, .block_size = 4}});
  // Cancelled at once, or after its first tokens: either way its stream ends (aborted, unless it had already
  // finished) and its blocks go back to the pool.
  for (bool read_first : {false, true}) {
    auto s = loop.submit({1, 2, 3}, 24, {.temperature = 0});
    if (read_first) s->next();
    s->cancel();
    auto [tokens, end] = read_to_end(*s);
    EXPECT_TRUE(*end.finish == FinishReason::kAborted || *end.finish == FinishReason::kLength);
    EXPECT_LE(tokens.size(), 24u);
  }
  auto ok = loop.submit({4, 5, 6}, 3, {.temperature = 0});  // after both: the loop serves on, the cache whole
  EXPECT_EQ(read_to_end(*ok).first.size(), 3u);
  EXPECT_EQ(loop.metrics().blocks_free, 16);
}

TEST(EngineLoop, StopEndsOpenStreamsAndRefusesNewOnes) {
  EngineLoop loop(engine_loop_model(), {.scheduler = {.num_blocks = 16, .block_size = 4}});
  loop.stop();
  auto s = loop.submit({1, 2, 3}, 2, {});
  auto [tokens, end] = read_to_end(*s);
  EXPECT_FALSE(end.rejected);
  EXPECT_NE(end.error.find("shutting down"), std::string::npos);
}

TEST(EngineLoop, DrainRefusesNewRequestsWhileTheQueuedOnesFinish) {
  EngineLoop loop(engine_loop_model(), {.scheduler = {.num_blocks = 16, .block_size = 4, .max_running = 1}});
  auto running = loop.submit({1, 2, 3}, 24, {.temperature = 0});
  auto queued = loop.submit({4, 5, 6}, 24, {.temperature = 0});  // behind it: max_running 1
  loop.drain();
  EXPECT_TRUE(loop.draining());
  auto late = loop.submit({7, 8}, 2, {});
  auto [late_tokens, late_end] = read_to_end(*late);
  EXPECT_TRUE(late_tokens.empty());
  EXPECT_FALSE(late_end.rejected);  // the server's state, not the request's fault: 503
  EXPECT_NE(late_end.error.find("shutting down"), std::string::npos) << late_end.error;
  EXPECT_TRUE(loop.wait_idle(EngineLoop::Clock::now() + std::chrono::minutes(2)));
  for (auto* s : {&running, &queued}) {
    auto [tokens, end] = read_to_end(**s);
    EXPECT_TRUE(end.error.empty()) << end.error;
    EXPECT_EQ(*end.finish, FinishReason::kLength);
    EXPECT_EQ(tokens.size(), 24u);
  }
  EXPECT_EQ(loop.metrics().blocks_free, 16);
  EXPECT_EQ(loop.stop(), 0);  // nothing was left to cut
}

TEST(EngineLoop, StopCountsTheRequestsItLeavesUnfinished) {
  EngineLoop loop(engine_loop_model(), {.scheduler = {.num_blocks = 16, .block_size = 4, .max_running = 1}});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(loop.submit({1, 2, static_cast<TokenId>(3 + i)}, 24, {}));
  streams[0]->next();  // the first runs
  const int64_t ended = loop.stop();
  // However far the loop got, the count is the streams that ended with the shutdown's error.
  int64_t unfinished = 0;
  for (auto& s : streams) {
    auto [tokens, end] = read_to_end(*s);
    if (!end.error.empty()) ++unfinished;
  }
  EXPECT_EQ(ended, unfinished);
  EXPECT_EQ(loop.stop(), 0);  // idempotent
}

}  // namespace
}  // namespace meshtrain::serve
