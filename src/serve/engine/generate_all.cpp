#include "meshtrain/serve/engine/generate_all.h"

#include <unordered_map>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {

EngineOptions engine_options(const GenerateOptions& options) {
  return {.eos_tokens = options.eos_tokens,
          .cuda_graphs = options.cuda_graphs,
          .cuda_graph_batch_sizes = decode_graph_batch_sizes(options.scheduler.max_running),
          .tp = options.tp};
}

std::vector<GenerationResult> generate_all(model::Transformer& model, const std::vector<GenerationRequest>& requests,
                                           const GenerateOptions& options, SchedulerStats* stats) {
  Scheduler scheduler(options.scheduler);
  PagedKvCache cache(*model, options.scheduler.num_blocks, options.scheduler.block_size);
  Engine engine(model, cache, engine_options(options));
  std::vector<GenerationResult> results(requests.size());
  std::unordered_map<RequestId, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    engine.add(requests[i].request, requests[i].sampling);
    scheduler.add(requests[i].request);
    results[i].id = requests[i].request.id;
    index[results[i].id] = i;
  }
  GenerateProgress progress{.total = requests.size()};
  while (scheduler.has_work()) {
    const StepPlan plan = scheduler.step();
    MT_CHECK(!plan.empty(), "generate_all: the scheduler has work but planned an empty step");
    std::vector<SampledToken> sampled = engine.step(plan, scheduler);
    for (SampledToken& t : sampled) {
      const size_t i = index.at(t.id);
      results[i].tokens.push_back(t.token);
      if (!t.stop && options.stop_at) t.stop = options.stop_at(i, t.token);
    }
    progress.generated_tokens += static_cast<int64_t>(sampled.size());
    for (const Finished& f : scheduler.on_tokens(sampled)) {
      results[index.at(f.id)].reason = f.reason;
      engine.remove(f.id);
      ++progress.finished;
    }
    if (options.on_step) options.on_step(progress);
  }
  if (stats) *stats = scheduler.stats();
  return results;
}

}  // namespace meshtrain::serve
