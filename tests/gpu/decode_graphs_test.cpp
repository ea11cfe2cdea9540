// CUDA graphs of decode steps (serve/engine/decode_graphs.h) on a GPU, with a random-init Llama (4 layers, 512
// wide, GQA, bf16):
//  - in lockstep, every step of one scheduler's plan runs three ways — the graphs over one cache, the eager paged
//    forward over another, and the fp32 model over a third — and the sampled (greedy, from the eager logits) tokens
//    go back to the scheduler. Every step's graph-cache logits must be no further from fp32 than twice the eager
//    bf16 logits are (plus a floor). The requests arrive so that the steps cover a batch padded up (3 → 4, 5 → 8),
//    a request finishing mid-way (the batch shrinks), prefill chunks between decodes (eager steps reading what the
//    graphs wrote), and sizes 1 to 8. A replay changes no cache row but its batch's slots and the scratch block's;
//    padding writes the scratch block only, which the scheduler never hands out;
//  - the engine (generate_all, and the Engine itself to see its graphs used) with graphs on and off: the same
//    greedy tokens up to the first near-tie of the eager model;
//  - a step's rows staged from the host (DecodeGraphs::run(rows)) replay to the very logits of its step batch
//    copied in, and the argmax taken inside the graph (run_argmax) is the host sampler's greedy pick of them;
//  - the engine's direct graph steps (EngineOptions::direct_graph_steps: host rows, the in-graph argmax for greedy
//    steps) give exactly the tokens of its step-batch path, greedy and seeded sampling mixed.
// Each step prints one line (which path, the batch and graph sizes, the three distances), to diagnose from the log.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/serve/engine/decode_graphs.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/sampler.h"
#include "meshtrain/serve/engine/step_batch.h"
#include "meshtrain/serve/scheduler.h"
#include "support/engine_tokens.h"
#include "support/gpu_test_main.h"
#include "support/tiny_model.h"

namespace meshtrain::serve {
namespace {

constexpr int64_t kVocab = 1000;
// Greedy tokens of two paths may differ where the eager model's two best logits are closer than this.
constexpr double kNearTie = 0.05;

model::Transformer graphs_model(at::ScalarType dtype) {
  const auto cfg = testing_support::tiny_model({.family = "llama", .vocab_size = kVocab, .n_layer = 4, .n_head = 8,
                                                .n_kv_head = 2, .d_model = 512, .d_ff = 1024, .max_seq_len = 256});
  model::Transformer net(cfg, at::TensorOptions().device(at::kCUDA).dtype(dtype));
  net->init_weights(11);
  net->eval();
  return net;
}

Request graphs_request(RequestId id, int32_t prompt_len, int32_t max_new) {
  std::vector<TokenId> prompt;
  for (int32_t j = 0; j < prompt_len; ++j) prompt.push_back((id * 37 + j * 11 + 5) % kVocab);
  return {id, prompt, max_new};
}

double max_distance(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// The cache rows [slots, H_kv · hd] of every layer's keys and values, copied.
std::vector<at::Tensor> cache_snapshot(PagedKvCache& cache) {
  std::vector<at::Tensor> out;
  for (const auto& l : cache.layers())
    for (const at::Tensor* t : {&l.k, &l.v}) out.push_back(t->reshape({t->size(0) * t->size(1), -1}).clone());
  return out;
}

// The slots whose rows differ between two snapshots, in any layer.
std::set<int64_t> changed_slots(const std::vector<at::Tensor>& before, const std::vector<at::Tensor>& after) {
  std::set<int64_t> out;
  for (size_t i = 0; i < before.size(); ++i) {
    const auto rows = (before[i] != after[i]).any(1).nonzero().flatten().cpu();
    for (int64_t j = 0; j < rows.numel(); ++j) out.insert(rows[j].item<int64_t>());
  }
  return out;
}

// Whether block `b` is all zeros in every layer of `cache`.
bool block_is_zero(PagedKvCache& cache, int64_t b) {
  for (const auto& l : cache.layers())
    if (l.k[b].count_nonzero().item<int64_t>() != 0 || l.v[b].count_nonzero().item<int64_t>() != 0) return false;
  return true;
}

// What the lockstep run saw.
struct LockstepLog {
  std::vector<std::pair<int64_t, int64_t>> graph_steps;  // (rows, graph size) per replayed step
  int64_t eager_after_graph = 0;                         // eager steps with decodes after the first replay
  std::set<int64_t> handed_out;                          // every block a sequence held
};

class DecodeGraphsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    net16_ = graphs_model(at::kBFloat16);
    net32_ = graphs_model(at::kFloat);
  }
  model::Transformer net16_{nullptr}, net32_{nullptr};
};

TEST_F(DecodeGraphsGpu, EveryStepMatchesTheEagerStep) {
  torch::NoGradGuard no_grad;
  const SchedulerOptions so{.num_blocks = 40, .block_size = 16, .max_tokens_per_step = 48, .max_running = 8};
  Scheduler sched(so);
  PagedKvCache graph_cache(*net16_, so.num_blocks, so.block_size), eager_cache(*net16_, so.num_blocks, so.block_size),
      ref_cache(*net32_, so.num_blocks, so.block_size);
  ASSERT_TRUE(DecodeGraphs::supported(*net16_, graph_cache))
      << "the decode kernel does not take this model (bf16, 8 query and 2 key/value heads of 64): nothing to capture";
  DecodeGraphs graphs(net16_, graph_cache, decode_graph_batch_sizes(so.max_running));
  std::printf("captured %zu graphs in %.3f s\n", graphs.batch_sizes().size(), graphs.capture_seconds());
  ASSERT_EQ(graph_cache.scratch_block(), so.num_blocks);
  EXPECT_FALSE(block_is_zero(graph_cache, so.num_blocks)) << "the warm-up's padding wrote no scratch keys";

  // Step 0: three requests (3 decodes → graph 4 from step 2; the second finishes at step 5, leaving 2). Step 8:
  // three more, prefilled beside the decodes, then 5 decodes → graph 8, shrinking to 1 as they finish.
  const std::map<int, std::vector<Request>> arrivals = {
      {0, {graphs_request(1, 20, 14), graphs_request(2, 33, 5), graphs_request(3, 7, 24)}},
      {8, {graphs_request(4, 40, 10), graphs_request(5, 18, 12), graphs_request(6, 9, 6)}}};
  LockstepLog seen;
  for (int step = 0; sched.has_work() || step <= arrivals.rbegin()->first; ++step) {
    if (const auto it = arrivals.find(step); it != arrivals.end())
      for (const Request& r : it->second) sched.add(r);
    if (!sched.has_work()) continue;
    const StepPlan plan = sched.step();
    ASSERT_FALSE(plan.empty()) << "step " << step;
    for (const auto* chunks : {&plan.decodes, &plan.prefills})
      for (const Chunk& c : *chunks)
        for (BlockId b : sched.sequence(c.id).table.blocks()) {
          ASSERT_LT(b, so.num_blocks) << "step " << step << ": request " << c.id << " holds the scratch block";
          seen.handed_out.insert(b);
        }
    const StepBatch sb = make_step_batch(plan, sched, at::kCUDA);
    const bool replay = graphs.takes(sb.batch);
    at::Tensor logits;
    std::string path = "eager";
    if (replay) {
      const auto before = cache_snapshot(graph_cache);
      const auto replays = graphs.replays();
      logits = graphs.run(sb.batch).clone();
      const int64_t rows = sb.batch.num_decodes;
      size_t used = 0;
      while (used < replays.size() && graphs.replays()[used] == replays[used]) ++used;
      ASSERT_LT(used, replays.size()) << "step " << step << ": run() replayed no graph";
      seen.graph_steps.push_back({rows, graphs.batch_sizes()[used]});
      path = "graph " + std::to_string(rows) + "->" + std::to_string(graphs.batch_sizes()[used]);
      // Only the batch's own slots and the scratch block may change.
      std::set<int64_t> allowed;
      const auto slots = sb.batch.slots.cpu();
      for (int64_t i = 0; i < slots.numel(); ++i) allowed.insert(slots[i].item<int64_t>());
      for (int64_t o = 0; o < so.block_size; ++o) allowed.insert(int64_t{so.num_blocks} * so.block_size + o);
      for (int64_t s : changed_slots(before, cache_snapshot(graph_cache)))
        EXPECT_TRUE(allowed.count(s)) << "step " << step << " (" << path << ") changed cache slot " << s
                                      << " (block " << s / so.block_size << ") outside its batch";
    } else {
      logits = model::paged_logits(*net16_, sb.batch, graph_cache.layers());
      if (!seen.graph_steps.empty() && sb.batch.num_decodes > 0) ++seen.eager_after_graph;
    }
    const auto eager = model::paged_logits(*net16_, sb.batch, eager_cache.layers());
    const auto ref = model::paged_logits(*net32_, sb.batch, ref_cache.layers());
    const double graph_err = max_distance(logits, ref), eager_err = max_distance(eager, ref);
    std::printf("step %2d: %-10s %zu decodes + %zu prefills | vs fp32: this %.5f, eager %.5f | vs eager %.5f\n",
                step, path.c_str(), plan.decodes.size(), plan.prefills.size(), graph_err, eager_err,
                max_distance(logits, eager));
    EXPECT_LE(graph_err, 2 * eager_err + 2e-3) << "step " << step << " (" << path << ")";
    const auto next = eager.argmax(-1).cpu();
    std::vector<SampledToken> sampled;
    for (size_t i = 0; i < sb.sampling.size(); ++i) {
      const auto token = static_cast<TokenId>(next[static_cast<int64_t>(i)].item<int64_t>());
      sampled.push_back({sb.sampling[i]->request.id, token, false});
    }
    sched.on_tokens(sampled);
  }

  const auto& replays = graphs.replays();
  EXPECT_EQ(std::accumulate(replays.begin(), replays.end(), int64_t{0}),
            static_cast<int64_t>(seen.graph_steps.size()));
  const auto has = [&](int64_t rows, int64_t size) {
    return std::count(seen.graph_steps.begin(), seen.graph_steps.end(), std::make_pair(rows, size)) > 0;
  };
  EXPECT_TRUE(has(3, 4)) << "no step of 3 decodes replayed graph 4";
  EXPECT_TRUE(has(5, 8)) << "no step of 5 decodes replayed graph 8";
  EXPECT_TRUE(has(2, 2) && has(1, 1)) << "the batch never shrank to 2 and 1";
  EXPECT_GT(seen.eager_after_graph, 0) << "no eager step with decodes followed a replay";
  // Padding wrote the scratch block of the graphs' cache; the eager cache never wrote its own; blocks no sequence
  // held stayed empty in both.
  EXPECT_FALSE(block_is_zero(graph_cache, so.num_blocks));
  EXPECT_TRUE(block_is_zero(eager_cache, so.num_blocks));
  for (int64_t b = 0; b < so.num_blocks; ++b) {
    if (seen.handed_out.count(b)) continue;
    EXPECT_TRUE(block_is_zero(graph_cache, b)) << "block " << b << ", never handed out, was written";
  }
}

// The eager model's gap between its two best logits after `tokens` (prompt and generated).
double eager_top2_gap(model::Transformer& net, const std::vector<TokenId>& tokens) {
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  const auto logits = net->forward(at::tensor(ids, at::kLong).view({1, -1}).cuda()).select(1, -1).squeeze(0);
  const auto top = std::get<0>(logits.to(at::kFloat).topk(2)).cpu();
  return top[0].item<double>() - top[1].item<double>();
}

// `a` (a run with graphs, named `what`) equals `eager` (the run without) up to the first token where the eager
// model's two best logits are within kNearTie, where bf16 rounding may pick either.
void expect_equal_up_to_near_tie(model::Transformer& net, const Request& r, const char* what,
                                 const std::vector<TokenId>& a, const std::vector<TokenId>& eager) {
  ASSERT_EQ(a.size(), eager.size()) << "request " << r.id << ", " << what;
  const size_t k = static_cast<size_t>(std::mismatch(a.begin(), a.end(), eager.begin()).first - a.begin());
  std::printf("request %lld, %s: %zu tokens, equal to eager's for the first %zu\n", static_cast<long long>(r.id),
              what, a.size(), k);
  if (k == a.size()) return;
  std::vector<TokenId> context = r.prompt;
  context.insert(context.end(), eager.begin(), eager.begin() + static_cast<std::ptrdiff_t>(k));
  const double gap = eager_top2_gap(net, context);
  EXPECT_LT(gap, kNearTie) << "request " << r.id << ", " << what << ": token " << k << " is " << a[k] << ", "
                           << eager[k] << " without graphs, where the eager model's two best logits are " << gap
                           << " apart";
}

using testing_support::engine_tokens;

TEST_F(DecodeGraphsGpu, EngineGivesTheEagerTokens) {
  torch::NoGradGuard no_grad;
  // 4 running of 6: the last two are admitted (prefill steps) as the first finish.
  const SchedulerOptions so{.num_blocks = 40, .block_size = 16, .max_tokens_per_step = 64, .max_running = 4};
  std::vector<GenerationRequest> requests;
  const int32_t lens[] = {20, 33, 7, 40, 18, 9}, news[] = {14, 5, 24, 10, 12, 6};
  for (int i = 0; i < 6; ++i) requests.push_back({graphs_request(10 + i, lens[i], news[i]), {.temperature = 0}});

  GenerateOptions on{.scheduler = so}, off{.scheduler = so, .cuda_graphs = false};
  const auto with = generate_all(net16_, requests, on), without = generate_all(net16_, requests, off);

  PagedKvCache cache(*net16_, so.num_blocks, so.block_size);
  EngineOptions direct_on = engine_options(on);
  direct_on.direct_graph_steps = true;
  Engine engine(net16_, cache, direct_on);
  ASSERT_NE(engine.graphs(), nullptr) << "the engine captured no graphs";
  const auto direct = engine_tokens(engine, so, requests);
  const auto& replays = engine.graphs()->replays();
  const int64_t replayed = std::accumulate(replays.begin(), replays.end(), int64_t{0});
  std::printf("engine: %lld decode steps replayed (", static_cast<long long>(replayed));
  for (size_t i = 0; i < replays.size(); ++i)
    std::printf("%s%lld at %lld", i ? ", " : "", static_cast<long long>(replays[i]),
                static_cast<long long>(engine.graphs()->batch_sizes()[i]));
  std::printf(")\n");
  EXPECT_GT(replayed, 0);
  PagedKvCache eager_cache(*net16_, so.num_blocks, so.block_size);
  Engine eager_engine(net16_, eager_cache, engine_options(off));
  EXPECT_EQ(eager_engine.graphs(), nullptr);

  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i].request;
    expect_equal_up_to_near_tie(net16_, r, "generate_all with graphs", with[i].tokens, without[i].tokens);
    expect_equal_up_to_near_tie(net16_, r, "the engine's own loop with graphs", direct.at(r.id), without[i].tokens);
  }
}

// With the blocks' weights held in FP8 (model/fp8_weights.h: the row-scaled FP8 GEMMs and the activations' casts
// captured in the graphs), graphs on and off give the same greedy tokens up to the first near-tie of the eager
// FP8 model.
TEST_F(DecodeGraphsGpu, Fp8WeightsGraphsGiveTheEagerTokens) {
  torch::NoGradGuard no_grad;
  if (!model::fp8_matmul_available(c10::Device(at::kCUDA, 0))) GTEST_SKIP() << "no FP8 matmuls on this GPU";
  const SchedulerOptions so{.num_blocks = 40, .block_size = 16, .max_tokens_per_step = 64, .max_running = 4};
  std::vector<GenerationRequest> requests;
  const int32_t lens[] = {20, 33, 7, 40, 18}, news[] = {14, 5, 24, 10, 12};
  for (int i = 0; i < 5; ++i) requests.push_back({graphs_request(30 + i, lens[i], news[i]), {.temperature = 0}});
  const auto bf16 = generate_all(net16_, requests, {.scheduler = so, .cuda_graphs = false});
  const auto s = model::hold_weights_in_fp8(*net16_);
  EXPECT_EQ(s.layers, 4 * 7);
  EXPECT_LT(s.bytes_after, s.bytes_before * 0.52) << "e4m3 codes and one fp32 scale per row, against bf16";
  PagedKvCache cache(*net16_, so.num_blocks, so.block_size);
  Engine engine(net16_, cache, engine_options({.scheduler = so}));
  ASSERT_NE(engine.graphs(), nullptr) << "the FP8 engine captured no graphs";
  EXPECT_EQ(engine.fused_projection_groups(), 4 * 2) << "q/k/v and gate/up side by side in FP8";
  const auto with = engine_tokens(engine, so, requests);
  const auto without = generate_all(net16_, requests, {.scheduler = so, .cuda_graphs = false});
  size_t same_as_bf16 = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i].request;
    expect_equal_up_to_near_tie(net16_, r, "FP8 weights with graphs", with.at(r.id), without[i].tokens);
    const auto& b = bf16[i].tokens;
    same_as_bf16 += static_cast<size_t>(std::mismatch(b.begin(), b.end(), without[i].tokens.begin()).first - b.begin());
    total += b.size();
  }
  std::printf("FP8 weights: %zu of %zu greedy tokens equal to bf16's before the first difference\n", same_as_bf16,
              total);
}

// Every decode-only step of five requests run three ways on one graph set: the step batch copied in, the host rows
// staged, and the in-graph argmax; the logits of the first two are the same bits, the argmax is the sampler's.
TEST_F(DecodeGraphsGpu, HostRowsAndInGraphArgmaxEqualTheBatchPath) {
  torch::NoGradGuard no_grad;
  const SchedulerOptions so{.num_blocks = 40, .block_size = 16, .max_tokens_per_step = 256, .max_running = 8};
  Scheduler sched(so);
  PagedKvCache cache(*net16_, so.num_blocks, so.block_size);
  DecodeGraphs graphs(net16_, cache, decode_graph_batch_sizes(so.max_running));
  ASSERT_TRUE(graphs.has_argmax());
  for (int32_t i = 1; i <= 5; ++i) sched.add(graphs_request(static_cast<RequestId>(i), 10 + 7 * i, 6 + 2 * i));
  const SamplingParams greedy{.temperature = 0};
  int checked = 0;
  std::vector<DecodeRow> rows;
  std::vector<const Sequence*> seqs;
  while (sched.has_work()) {
    const StepPlan plan = sched.step();
    const StepBatch sb = make_step_batch(plan, sched, at::kCUDA);
    std::vector<TokenId> next;
    if (make_decode_rows(plan, sched, rows, seqs) && graphs.takes(rows)) {
      const auto from_batch = graphs.run(sb.batch).clone();  // both rewrite the step's slots with the same keys
      const auto from_rows = graphs.run(rows).clone();
      EXPECT_TRUE(at::equal(from_rows, from_batch)) << "step of " << rows.size() << " rows: largest difference "
                                                    << max_distance(from_rows, from_batch);
      next = graphs.run_argmax(rows);
      std::vector<SampleRow> sample;
      for (const Sequence* q : seqs) sample.push_back({&greedy, q->tokens, q->num_generated()});
      EXPECT_EQ(next, sample_tokens(from_rows, sample)) << "step of " << rows.size() << " rows";
      ++checked;
    } else {
      const auto ids = model::paged_logits(*net16_, sb.batch, cache.layers()).argmax(-1).cpu();
      for (int64_t i = 0; i < ids.numel(); ++i) next.push_back(ids[i].item<int64_t>());
    }
    std::vector<SampledToken> sampled;
    for (size_t i = 0; i < next.size(); ++i) sampled.push_back({sb.sampling[i]->request.id, next[i], false});
    sched.on_tokens(sampled);
  }
  EXPECT_GT(checked, 5) << "too few decode-only steps replayed";
}

// The engine with direct graph steps and without, over two caches of one model: the same tokens, exactly. The
// first request samples (seeded, temperature 0.8) and finishes after 4 tokens, running beside three greedy ones:
// those steps replay host rows and sample on the host; the fifth request (greedy) then takes its place, and the
// all-greedy steps after its prefill take the in-graph argmax.
TEST_F(DecodeGraphsGpu, DirectGraphStepsGiveTheBatchPathsTokens) {
  torch::NoGradGuard no_grad;
  const SchedulerOptions so{.num_blocks = 40, .block_size = 16, .max_tokens_per_step = 256, .max_running = 4};
  std::vector<GenerationRequest> requests;
  requests.push_back({graphs_request(30, 15, 4), {.temperature = 0.8, .seed = 7}});
  for (int i = 0; i < 4; ++i) requests.push_back({graphs_request(20 + i, 9 + 5 * i, 12), {.temperature = 0}});
  GenerateOptions opts{.scheduler = so};
  EngineOptions direct_opts = engine_options(opts), batch_opts = engine_options(opts);
  direct_opts.direct_graph_steps = true;
  batch_opts.direct_graph_steps = false;
  PagedKvCache direct_cache(*net16_, so.num_blocks, so.block_size), batch_cache(*net16_, so.num_blocks, so.block_size);
  Engine direct(net16_, direct_cache, direct_opts);
  Engine batch(net16_, batch_cache, batch_opts);
  ASSERT_NE(direct.graphs(), nullptr);
  const auto want = engine_tokens(batch, so, requests);
  EXPECT_EQ(engine_tokens(direct, so, requests), want);
  const auto& replays = direct.graphs()->replays();
  EXPECT_GT(std::accumulate(replays.begin(), replays.end(), int64_t{0}), 10);
}

}  // namespace
}  // namespace meshtrain::serve

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return meshtrain::testing_support::kCudaKernels ? std::string()
                                                    : std::string("built without meshtrain's CUDA kernels (no nvcc)");
  });
}
