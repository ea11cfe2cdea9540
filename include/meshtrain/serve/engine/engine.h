// Engine: runs the scheduler's steps on the model (docs/serving.md "Engine"). step() turns a StepPlan into the
// model's ragged batch (serve/engine/step_batch.h), runs the paged forward (model/paged_forward.h) over the
// PagedKvCache, samples each sampling chunk's next token (serve/engine/sampler.h) and returns them for
// Scheduler::on_tokens, an EOS id marked `stop`. The engine keeps each request's sampling settings; the blocks
// are the scheduler's. On CUDA, decode-only steps replay CUDA graphs captured when the engine is made
// (serve/engine/decode_graphs.h), their rows staged from the host straight into the graph and, where every row is
// greedy, the tokens taken by the graph's own argmax; steps with prefill chunks, larger than the largest size, or
// on the CPU run eagerly. When it is made, the engine lays out each block's q/k/v and gate/up weights side by side
// so that each group is one GEMM (model/fused_projections.h). Under tensor parallelism (EngineOptions::tp) rank 0's
// engine broadcasts each step's batch first.
//
//   Scheduler sched(opts);  PagedKvCache cache(*model, opts.num_blocks, opts.block_size);
//   Engine engine(model, cache, {.eos_tokens = {2}});
//   sched.add(r);  engine.add(r, params);
//   while (sched.has_work()) for (Finished f : sched.on_tokens(engine.step(sched.step(), sched))) engine.remove(f.id);
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/decode_graphs.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/sampler.h"
#include "meshtrain/serve/engine/sampling_params.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

class TensorParallelSteps;  // serve/engine/tp_steps.h

struct EngineOptions {
  std::vector<TokenId> eos_tokens;  // sampling one of these ends the sequence (kStop); the token is kept
  // Decode-only steps replayed as CUDA graphs where the model is on CUDA and the decode kernel takes it
  // (DecodeGraphs::supported); off: every step eager (meshtrain serve --cuda-graphs).
  bool cuda_graphs = true;
  // The batch sizes captured, ascending: a decode step of b rows replays the smallest size ≥ b; one of more rows
  // than the largest runs eagerly. The scheduler's max_running should be the largest.
  std::vector<int64_t> cuda_graph_batch_sizes = decode_graph_batch_sizes(SchedulerOptions{}.max_running);
  // q, k and v (and SwiGLU's gate and up) of each block as one GEMM over their weights laid side by side once, when
  // the engine is made (model/fused_projections.h: the modules' parameters become views of one buffer, no second
  // copy). Off: the model's layout is left as it is (a model fused by an earlier engine stays fused). On by
  // default: serve_step_bench measured it faster on an H100 (docs/PERFORMANCE.md "GPU checks on an H100; the
  // engine's step paths"; CPU- and GPU-tested equal to the layout apart).
  bool fused_projections = true;
  // Decode-only steps that a graph takes go from the scheduler's sequences straight into the graph's inputs (two
  // copies, no step batch), and where every row is greedy without a repetition penalty the graph's own argmax
  // gives the tokens (one replay, one copy of the ids back: DecodeGraphs::run_argmax). Off: such steps make a
  // step batch, copy it in and sample after the replay, as before (serve_step_bench measures both). On by
  // default: gpu.serve.decode_graphs tests it against the step-batch path, and it is the faster of the two.
  bool direct_graph_steps = true;
  // Rank 0 of a tensor-parallel group: each step's batch is broadcast to the other ranks, which run the forward
  // with it (TensorParallelSteps::follow), and every step runs eagerly. Null: one process.
  std::shared_ptr<TensorParallelSteps> tp;
};

class Engine {
 public:
  // `cache` must outlive the engine and match the scheduler's num_blocks and block_size. Captures the decode
  // graphs (options.cuda_graphs, on CUDA); the model's weights and the cache must not move after.
  Engine(model::Transformer model, PagedKvCache& cache, EngineOptions options = {});

  // A request's sampling settings, before its first step. UserError for bad settings, or a request longer than
  // the model's max_seq_len (its prompt and max_new_tokens − 1 tokens go through the model).
  void add(const Request& r, const SamplingParams& params);
  // Forgets a finished or aborted request.
  void remove(RequestId id);

  // Runs `plan` (the scheduler's latest) and returns one token per chunk that samples.
  std::vector<SampledToken> step(const StepPlan& plan, const Scheduler& scheduler);

  // The captured decode steps, or nullptr where every step runs eagerly.
  const DecodeGraphs* graphs() const { return graphs_.get(); }
  // How many blocks' projection groups (q/k/v, gate/up) run as one GEMM (EngineOptions::fused_projections).
  int64_t fused_projection_groups() const { return fused_groups_; }

 private:
  // A decode-only step straight into its graph (EngineOptions::direct_graph_steps); false where the graphs do not
  // take `plan`, which then runs as any other step.
  bool direct_graph_step(const StepPlan& plan, const Scheduler& scheduler, std::vector<SampledToken>& out);
  std::vector<SampleRow> sample_rows(std::span<const Sequence* const> seqs) const;
  std::vector<SampledToken> sampled(std::span<const TokenId> tokens, std::span<const Sequence* const> seqs) const;

  model::Transformer model_;
  PagedKvCache& cache_;
  EngineOptions options_;
  std::unordered_map<RequestId, SamplingParams> params_;
  std::unique_ptr<DecodeGraphs> graphs_;
  int64_t fused_groups_ = 0;
  std::vector<DecodeRow> decode_rows_;  // direct_graph_step's, kept to reuse their memory
  std::vector<const Sequence*> decode_seqs_;
};

}  // namespace meshtrain::serve
