#include "meshtrain/serve/engine/engine.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/serve/engine/sampler.h"
#include "meshtrain/serve/engine/step_batch.h"
#include "meshtrain/serve/engine/tp_steps.h"

namespace meshtrain::serve {

Engine::Engine(model::Transformer model, PagedKvCache& cache, EngineOptions options)
    : model_(std::move(model)), cache_(cache), options_(std::move(options)) {
  // Under tensor parallelism a step is collectives between the layers: no graphs (a host-staged backend cannot
  // be captured).
  if (!options_.cuda_graphs || !model_->head_weight().is_cuda() || options_.tp) return;
  if (DecodeGraphs::supported(*model_, cache_)) {
    graphs_ = std::make_unique<DecodeGraphs>(model_, cache_, options_.cuda_graph_batch_sizes);
  } else {
    log::info("CUDA graphs: not used, the decode kernel does not take this model's heads or dtype; every step "
              "runs eagerly");
  }
}

void Engine::add(const Request& r, const SamplingParams& params) {
  check_sampling_params(r.id, params);
  const int64_t limit = model_->config().max_seq_len;
  const int64_t positions = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens - 1;
  MT_USER_CHECK(positions <= limit, "request ", r.id, ": the prompt (", r.prompt.size(),
                " tokens) and max_new_tokens (", r.max_new_tokens, ") need ", positions,
                " positions, model.max_seq_len is ", limit, "; shorten the prompt or lower max_new_tokens");
  const int64_t vocab = model_->config().vocab_size;
  for (TokenId t : r.prompt)
    MT_USER_CHECK(t >= 0 && t < vocab, "request ", r.id, ": prompt token ", t, " is outside the vocabulary [0, ",
                  vocab, ")");
  params_[r.id] = params;
}

void Engine::remove(RequestId id) { params_.erase(id); }

std::vector<SampledToken> Engine::step(const StepPlan& plan, const Scheduler& scheduler) {
  if (plan.empty()) return {};
  const at::Device device = model_->head_weight().device();
  const StepBatch sb = options_.tp ? options_.tp->lead(plan, scheduler, device)  // the same batch on every rank
                                   : make_step_batch(plan, scheduler, device);
  const auto logits = graphs_ && graphs_->takes(sb.batch)
                          ? graphs_->run(sb.batch)
                          : model::paged_logits(*model_, sb.batch, cache_.layers());  // [S, V]
  std::vector<SampleRow> rows;
  rows.reserve(sb.sampling.size());
  for (const Sequence* s : sb.sampling) {
    const auto it = params_.find(s->request.id);
    MT_CHECK(it != params_.end(), "Engine::step: request ", s->request.id, " was not added to the engine");
    rows.push_back({&it->second, s->tokens, s->num_generated()});
  }
  const std::vector<TokenId> tokens = sample_tokens(logits, rows);
  std::vector<SampledToken> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool eos = std::find(options_.eos_tokens.begin(), options_.eos_tokens.end(), tokens[i]) !=
                     options_.eos_tokens.end();
    out.push_back({sb.sampling[i]->request.id, tokens[i], eos});
  }
  return out;
}

}  // namespace meshtrain::serve
