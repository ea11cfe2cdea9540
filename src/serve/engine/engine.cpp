#include "meshtrain/serve/engine/engine.h"

#include <algorithm>

#ifdef MESHTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/serve/engine/sampler.h"
#include "meshtrain/serve/engine/step_batch.h"
#include "meshtrain/serve/engine/tp_steps.h"

namespace meshtrain::serve {

namespace {

// The blocks' projection groups laid side by side (model/fused_projections.h), and on CUDA the old tensors'
// memory, which the caching allocator keeps, handed back: the new buffers are the same bytes in other shapes.
int64_t engine_fuse_projections(model::TransformerImpl& model) {
  const int64_t groups = model::fuse_projections(model);
#ifdef MESHTRAIN_WITH_CUDA
  if (model.head_weight().is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  return groups;
}

}  // namespace

Engine::Engine(model::Transformer model, PagedKvCache& cache, EngineOptions options)
    : model_(std::move(model)), cache_(cache), options_(std::move(options)) {
  // Before the graphs capture the weights' addresses.
  if (options_.fused_projections) fused_groups_ = engine_fuse_projections(*model_);
  // Under tensor parallelism a step is collectives between the layers: no graphs (a host-staged backend cannot
  // be captured).
  if (!options_.cuda_graphs || !model_->head_weight().is_cuda() || options_.tp) return;
  if (DecodeGraphs::supported(*model_, cache_)) {
    graphs_ = std::make_unique<DecodeGraphs>(model_, cache_, options_.cuda_graph_batch_sizes,
                                             /*argmax=*/options_.direct_graph_steps);
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
  std::vector<SampledToken> out;
  if (graphs_ && options_.direct_graph_steps && direct_graph_step(plan, scheduler, out)) return out;
  const at::Device device = model_->head_weight().device();
  const StepBatch sb = options_.tp ? options_.tp->lead(plan, scheduler, device)  // the same batch on every rank
                                   : make_step_batch(plan, scheduler, device);
  const auto logits = graphs_ && graphs_->takes(sb.batch)
                          ? graphs_->run(sb.batch)
                          : model::paged_logits(*model_, sb.batch, cache_.layers());  // [S, V]
  return sampled(sample_tokens(logits, sample_rows(sb.sampling)), sb.sampling);
}

bool Engine::direct_graph_step(const StepPlan& plan, const Scheduler& scheduler, std::vector<SampledToken>& out) {
  if (!make_decode_rows(plan, scheduler, decode_rows_, decode_seqs_) || !graphs_->takes(decode_rows_)) return false;
  const std::vector<SampleRow> rows = sample_rows(decode_seqs_);
  const std::vector<TokenId> tokens = graphs_->has_argmax() && argmax_samples(rows)
                                          ? graphs_->run_argmax(decode_rows_)
                                          : sample_tokens(graphs_->run(decode_rows_), rows);
  out = sampled(tokens, decode_seqs_);
  return true;
}

std::vector<SampleRow> Engine::sample_rows(std::span<const Sequence* const> seqs) const {
  std::vector<SampleRow> rows;
  rows.reserve(seqs.size());
  for (const Sequence* s : seqs) {
    const auto it = params_.find(s->request.id);
    MT_CHECK(it != params_.end(), "Engine::step: request ", s->request.id, " was not added to the engine");
    rows.push_back({&it->second, s->tokens, s->num_generated()});
  }
  return rows;
}

std::vector<SampledToken> Engine::sampled(std::span<const TokenId> tokens,
                                          std::span<const Sequence* const> seqs) const {
  std::vector<SampledToken> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool eos = std::find(options_.eos_tokens.begin(), options_.eos_tokens.end(), tokens[i]) !=
                     options_.eos_tokens.end();
    out.push_back({seqs[i]->request.id, tokens[i], eos});
  }
  return out;
}

}  // namespace meshtrain::serve
