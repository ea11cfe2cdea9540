#include "meshtrain/serve/engine/generate_all.h"

#include <unordered_map>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {

EngineOptions engine_options(const GenerateOptions& options) {
  return {.eos_tokens = options.eos_tokens,
          .cuda_graphs = options.cuda_graphs,
          .cuda_graph_batch_sizes = decode_graph_batch_sizes(options.scheduler.max_running)};
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
  while (scheduler.has_work()) {
    const StepPlan plan = scheduler.step();
    MT_CHECK(!plan.empty(), "generate_all: the scheduler has work but planned an empty step");
    const std::vector<SampledToken> sampled = engine.step(plan, scheduler);
    for (const SampledToken& t : sampled) results[index.at(t.id)].tokens.push_back(t.token);
    for (const Finished& f : scheduler.on_tokens(sampled)) {
      results[index.at(f.id)].reason = f.reason;
      engine.remove(f.id);
    }
  }
  if (stats) *stats = scheduler.stats();
  return results;
}

}  // namespace meshtrain::serve
