// Where an engine step's time goes, on a random-init model of a preset shape (bf16, CUDA): for batches of B
// sequences decoding after a 128-token prompt, one step is timed whole (Scheduler::step + Engine::step +
// on_tokens, what the serving loop runs) and in its parts — the step's inputs built (a step batch copied to the
// device, or the host rows of a direct graph step), the graph replay (its inputs copied in; on the direct path
// also the in-graph argmax and the ids' copy back), the same forward run eagerly, the sampler — each the mean of
// 30 calls with the device synchronised around them. The prefill step of the B prompts is timed too. The eager
// and replayed steps of the smallest and largest batch are profiled (CUDA kernels only): kernels per step and
// the ten kernels that take the most time. Prints tables; writes JSON to argv[1].
//
// Each engine path of PATHS is measured in one run, on one model, so they compare side by side:
//   old     the step batch copied in, the sampler after the replay, q/k/v and gate/up one GEMM each
//           (EngineOptions: fused_projections and direct_graph_steps off);
//   direct  direct graph steps only (host rows staged into the graph, the argmax inside it);
//   new     direct graph steps and fused projections (the engine's defaults since this bench measured them);
//   fp8     new with the blocks' weights held in FP8 (model/fp8_weights.h, `meshtrain serve --quantization fp8`).
// They run in that order whatever order PATHS gives, because fusing and FP8 lay out the model's weights for good.
//
//   serve_step_bench OUT.json [PRESET (llama3.1-8b)] [BATCHES (1,8,64)] [PATHS (old,direct,new)]
//
// Exit code 77 without a GPU or without the CUDA kernels in the build; 2 for an unknown path.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#if MESHTRAIN_CUDA_KERNELS
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#include "meshtrain/core/config.h"
#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/sampler.h"
#include "meshtrain/serve/engine/step_batch.h"
#include "meshtrain/serve/scheduler.h"

using namespace meshtrain;
using namespace meshtrain::serve;

namespace {

constexpr int32_t kPrompt = 128;
constexpr int kCalls = 30;

// Mean wall milliseconds of `kCalls` calls, the device idle before and synchronised after.
double mean_ms(const std::function<void()>& call) {
  call();
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) call();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kCalls;
}

struct KernelTotal {
  std::string name;
  double ms_per_step = 0;
  double count_per_step = 0;
};

struct Profile {
  double kernels_per_step = 0, kernel_ms_per_step = 0;
  std::vector<KernelTotal> top;
};

#if MESHTRAIN_CUDA_KERNELS
// The CUDA kernels of `steps` calls of `call`, summed by name.
Profile profile_kernels(const std::function<void()>& call, int steps) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  call();
  torch::cuda::synchronize();
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  for (int i = 0; i < steps; ++i) call();
  torch::cuda::synchronize();
  const auto result = prof::disableProfiler();
  std::map<std::string, KernelTotal> by_name;
  Profile p;
  for (const auto& ev : result->events()) {
    if (ev.deviceType() != c10::DeviceType::CUDA) continue;
    const std::string name = ev.name();
    if (name.rfind("Memcpy", 0) == 0 || name.rfind("Memset", 0) == 0 || name.find("cuda") == 0) continue;
    auto& t = by_name[name];
    t.name = name.substr(0, 90);
    t.ms_per_step += static_cast<double>(ev.durationNs()) * 1e-6 / steps;
    t.count_per_step += 1.0 / steps;
    p.kernels_per_step += 1.0 / steps;
    p.kernel_ms_per_step += static_cast<double>(ev.durationNs()) * 1e-6 / steps;
  }
  for (auto& [_, t] : by_name) p.top.push_back(t);
  std::sort(p.top.begin(), p.top.end(), [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
  if (p.top.size() > 10) p.top.resize(10);
  return p;
}
#endif

// An engine path (the header's PATHS).
struct EnginePath {
  const char* name;
  bool direct, fused, fp8;
};
constexpr EnginePath kPaths[] = {{"old", false, false, false},
                                  {"direct", true, false, false},
                                  {"new", true, true, false},
                                  {"fp8", true, true, true}};

struct BatchRow {
  std::string path;
  int64_t batch = 0;
  double prefill_ms = 0, step_ms = 0, make_batch_ms = 0, graph_ms = 0, eager_ms = 0, sample_ms = 0;
  int64_t fused_groups = 0;
  Profile eager_profile, graph_profile;
};

std::vector<TokenId> bench_prompt(int64_t seq, int64_t vocab) {
  std::vector<TokenId> p;
  for (int32_t j = 0; j < kPrompt; ++j) p.push_back(static_cast<TokenId>((seq * 7919 + j * 131 + 3) % vocab));
  return p;
}

// The step's parts on one decode plan run again and again (each run rewrites the same cache slots).
void time_parts(BatchRow& row, model::Transformer& net, Engine& engine, Scheduler& sched, PagedKvCache& cache,
                const EnginePath& path, bool profile) {
  const StepPlan plan = sched.step();
  const auto device = net->head_weight().device();
  auto* graphs = const_cast<DecodeGraphs*>(engine.graphs());
  const StepBatch sb = make_step_batch(plan, sched, device);
  std::vector<DecodeRow> rows;
  std::vector<const Sequence*> seqs;
  std::function<void()> replay;
  if (path.direct) {
    row.make_batch_ms = mean_ms([&] { (void)make_decode_rows(plan, sched, rows, seqs); });
    if (graphs && graphs->takes(rows)) replay = [&] { (void)graphs->run_argmax(rows); };
  } else {
    row.make_batch_ms = mean_ms([&] { (void)make_step_batch(plan, sched, device); });
    if (graphs && graphs->takes(sb.batch)) replay = [&] { (void)graphs->run(sb.batch); };
  }
  if (replay) row.graph_ms = mean_ms(replay);
  row.eager_ms = mean_ms([&] { (void)model::paged_logits(*net, sb.batch, cache.layers()); });
  const at::Tensor logits = model::paged_logits(*net, sb.batch, cache.layers());
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<SampleRow> sample_rows;
  for (const Sequence* s : sb.sampling) sample_rows.push_back({&greedy, s->tokens, s->num_generated()});
  // The direct path's greedy steps take the argmax inside the graph: no sampler call.
  if (!path.direct) row.sample_ms = mean_ms([&] { (void)sample_tokens(logits, sample_rows); });
#if MESHTRAIN_CUDA_KERNELS
  if (profile) {
    row.eager_profile = profile_kernels([&] { (void)model::paged_logits(*net, sb.batch, cache.layers()); }, 5);
    if (replay) row.graph_profile = profile_kernels(replay, 5);
  }
#else
  (void)profile;
#endif
  std::vector<SampledToken> toks;
  const auto ids = sample_tokens(logits, sample_rows);
  for (size_t i = 0; i < ids.size(); ++i) toks.push_back({sb.sampling[i]->request.id, ids[i], false});
  sched.on_tokens(toks);
}

BatchRow bench_batch(model::Transformer net, int64_t B, bool profile, const EnginePath& path) {
  const int32_t decode_steps = 4 * kCalls + 8;
  const int32_t per_seq = (kPrompt + decode_steps + 15) / 16 + 1;
  const SchedulerOptions so{.num_blocks = static_cast<int32_t>(B) * per_seq + 8, .block_size = 16,
                            .max_tokens_per_step = static_cast<int32_t>(B) * kPrompt, .max_running = static_cast<int32_t>(B)};
  Scheduler sched(so);
  PagedKvCache cache(*net, so.num_blocks, so.block_size);
  Engine engine(net, cache,
                {.cuda_graphs = true, .cuda_graph_batch_sizes = {B}, .fused_projections = path.fused,
                 .direct_graph_steps = path.direct});
  SamplingParams greedy;
  greedy.temperature = 0;  // as meshtrain bench serve asks
  for (int64_t i = 0; i < B; ++i) {
    Request r{static_cast<RequestId>(i + 1), bench_prompt(i, net->config().vocab_size), decode_steps + 4};
    sched.add(r);
    engine.add(r, greedy);
  }
  auto run_step = [&] { sched.on_tokens(engine.step(sched.step(), sched)); };
  BatchRow row{path.name, B};
  row.fused_groups = engine.fused_projection_groups();
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  run_step();  // every prompt in one prefill step
  torch::cuda::synchronize();
  row.prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  row.step_ms = mean_ms(run_step);
  time_parts(row, net, engine, sched, cache, path, profile);
  return row;
}

// PATHS (a comma-separated list) as kPaths entries in kPaths' order; exits 2 naming an unknown one.
std::vector<EnginePath> parse_paths(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream list(text);
  for (std::string p; std::getline(list, p, ',');) names.push_back(p);
  for (const auto& n : names) {
    if (std::none_of(std::begin(kPaths), std::end(kPaths), [&](const EnginePath& p) { return n == p.name; })) {
      std::fprintf(stderr, "serve_step_bench: PATHS: unknown path '%s'; valid: old, direct, new, fp8\n", n.c_str());
      std::exit(2);
    }
  }
  std::vector<EnginePath> out;
  for (const EnginePath& p : kPaths)
    if (std::find(names.begin(), names.end(), p.name) != names.end()) out.push_back(p);
  return out;
}

nlohmann::json profile_json(const Profile& p) {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& k : p.top) top.push_back({{"name", k.name}, {"ms", k.ms_per_step}, {"count", k.count_per_step}});
  return {{"kernels_per_step", p.kernels_per_step}, {"kernel_ms_per_step", p.kernel_ms_per_step}, {"top", top}};
}

void print_profile(const char* what, int64_t B, const Profile& p) {
  if (p.kernels_per_step == 0) return;
  std::printf("\n%s step, batch %lld: %.0f kernels, %.3f ms of kernel time per step; the ten longest:\n", what,
              static_cast<long long>(B), p.kernels_per_step, p.kernel_ms_per_step);
  for (const auto& k : p.top) std::printf("  %8.3f ms %6.1f×  %s\n", k.ms_per_step, k.count_per_step, k.name.c_str());
}

}  // namespace

int main(int argc, char** argv) {
#if !MESHTRAIN_CUDA_KERNELS
  std::printf("serve_step_bench: skipped (a build without the CUDA kernels)\n");
  return 77;
#endif
  if (!torch::cuda::is_available()) {
    std::printf("serve_step_bench: skipped (no GPU)\n");
    return 77;
  }
  const std::string out = argc > 1 ? argv[1] : "serve_step_bench.json";
  const std::string preset = argc > 2 ? argv[2] : "llama3.1-8b";
  std::vector<int64_t> batches;
  std::stringstream list(argc > 3 ? argv[3] : "1,8,64");
  for (std::string b; std::getline(list, b, ',');) batches.push_back(std::stoll(b));
  const std::vector<EnginePath> paths = parse_paths(argc > 4 ? argv[4] : "old,direct,new");
  torch::NoGradGuard no_grad;
  ModelConfig cfg;
  apply_model_preset(preset, cfg);
  cfg.max_seq_len = 1024;
  model::Transformer net(cfg, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  net->init_weights(0);
  net->eval();
  int64_t weight_bytes = 0;
  for (const auto& p : net->parameters()) weight_bytes += p.numel() * p.element_size();
  std::printf("serve_step_bench: %s, bf16, %.2f GB of weights, prompt %d\n\n", preset.c_str(), weight_bytes / 1e9,
              kPrompt);
  std::printf("| path | B | prefill ms | step ms | tok/s | step inputs ms | graph ms | eager ms | sample ms | "
              "fused groups |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<BatchRow> rows;
  for (const EnginePath& path : paths) {
    if (path.fp8) {
      const auto s = model::hold_weights_in_fp8(*net);
      std::printf("| (fp8: %lld layers, %.2f GB -> %.2f GB) |\n", static_cast<long long>(s.layers),
                  s.bytes_before / 1e9, s.bytes_after / 1e9);
    }
    for (size_t i = 0; i < batches.size(); ++i) {
      const BatchRow r = bench_batch(net, batches[i], i == 0 || i + 1 == batches.size(), path);
      char sample[32] = "in graph";
      if (!path.direct) std::snprintf(sample, sizeof sample, "%.3f", r.sample_ms);
      std::printf("| %s | %lld | %.2f | %.3f | %.0f | %.3f | %.3f | %.3f | %s | %lld |\n", r.path.c_str(),
                  static_cast<long long>(r.batch), r.prefill_ms, r.step_ms, 1e3 * r.batch / r.step_ms,
                  r.make_batch_ms, r.graph_ms, r.eager_ms, sample, static_cast<long long>(r.fused_groups));
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  for (const auto& r : rows) {
    print_profile(("[" + r.path + "] eager").c_str(), r.batch, r.eager_profile);
    print_profile(("[" + r.path + "] replayed").c_str(), r.batch, r.graph_profile);
  }
  nlohmann::json j = {{"preset", preset}, {"dtype", "bf16"}, {"weight_bytes", weight_bytes}, {"prompt", kPrompt}};
  for (const auto& r : rows)
    j["rows"].push_back({{"path", r.path}, {"batch", r.batch}, {"fused_groups", r.fused_groups},
                         {"prefill_ms", r.prefill_ms}, {"step_ms", r.step_ms},
                         {"make_batch_ms", r.make_batch_ms}, {"graph_ms", r.graph_ms}, {"eager_ms", r.eager_ms},
                         {"sample_ms", r.sample_ms}, {"eager_profile", profile_json(r.eager_profile)},
                         {"graph_profile", profile_json(r.graph_profile)}});
  std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}
