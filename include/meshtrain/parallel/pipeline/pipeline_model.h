// PipelineModel: pipeline parallelism behind the ParallelModel interface (docs/pipeline.md). This rank holds
// `chunks` model chunks (virtual stages chunk · pp + rank of a split by parameter count:
// parallel/pipeline/pipeline_split.h), each a ParallelModel of its own over the dp/fsdp/tp groups (DDP, ZeRO, FSDP,
// HSDP, TP + SP inside the stage). forward_backward — the step seam — walks this rank's action list of the
// schedule (parallel/pipeline/pipeline_schedule.h):
//
//   the step's batch (grad_accum micro-batches, concatenated) is cut into m = pp_microbatches pieces
//   F(i, c)   receive x from the previous stage (none on the first), forward chunk c under autocast, send the
//             output to the next stage (the last stage keeps the loss / m)
//   B(i, c)   receive the output's gradient (none on the last), backward through chunk c, send x's gradient
//   I / W     ZB-H1's split: I takes x's gradient only (autograd to the input) and sends it; W then runs the
//             backward into the weights
//
// Each pipeline micro-batch carries its packed documents (every stage's attention and positions) and its loss
// weight (the step's token mean of loss-masked data): src/parallel/pipeline/pipeline_batch.h.
// The last backward of each chunk reduces gradients over its data-parallel group (sync), the others skip it;
// a tied embedding's two copies (first and last stage) then sum their gradients
// (src/parallel/pipeline/tied_embedding.h). The loss lives on the last stage and is broadcast over pp, so
// every rank returns the same value; clip_grad_norm sums the squared norms of every chunk over pp (the tied
// weight counted once). Activations travel in fp32 (the residual stream's dtype under autocast too), so a
// pipeline computes what the single process computes.
//
// Not supported: generation (parallel.pp > 1 needs train.sample_tokens 0; validate() says so).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/parallel/parallel_groups.h"
#include "meshtrain/parallel/parallel_model.h"
#include "meshtrain/parallel/pipeline/pipeline_schedule.h"
#include "meshtrain/parallel/trainable_policy.h"

namespace meshtrain::parallel {

class PipelineLinks;
class TiedEmbedding;

// One action as it ran: host seconds from the start of the step (compute only: waits for a receive come
// before `start`).
struct PipelineActionTime {
  PipeAction action;
  double start = 0, end = 0;
};

struct PipelineStepStats {
  double seconds = 0;                      // the whole forward_backward
  double bubble = 0;                       // 1 − compute / seconds on this rank
  int peak_live_activations = 0;           // micro-batches whose activations this rank held at once
  std::vector<PipelineActionTime> actions;  // in the order they ran
};

class PipelineModel : public ParallelModel {
 public:
  // Lays a chunk's stage module out inside the stage (TP, AC, DDP/FSDP: parallelize()'s fixed order).
  using LayoutFn = std::function<std::unique_ptr<ParallelModel>(model::Transformer stage)>;

  // `net` the whole model on the meta device (its parameter counts decide the split); `groups.pp` the pipeline
  // group (collective: every rank builds its links in the same order). Frozen parameters follow `policy`.
  PipelineModel(const model::Transformer& net, const ParallelGroups& groups, const Config& cfg,
                const at::Device& device, const TrainablePolicy& policy, const LayoutFn& layout);
  ~PipelineModel() override;

  at::Tensor forward_backward(const std::vector<MicroBatch>& batches) override;
  // A forward-only pass of one batch through every stage (evaluation): the loss, on every rank.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  const model::Documents* docs = nullptr) override;
  void backward(const at::Tensor& loss, bool sync) override;  // throws: the schedule runs the backwards
  std::vector<OptimParam> optimizer_params() const override;
  at::Tensor clip_grad_norm(double max_norm) override;
  void after_optimizer_step() override;
  void broadcast_parameters() override;
  std::vector<ShardedTensor> sharded_parameters() const override;
  std::string describe() const override;
  std::vector<std::pair<std::string, double>> step_metrics() const override;

  const PipelineSchedule& schedule() const { return schedule_; }
  const PipelineStepStats& last_step() const { return stats_; }
  int rank() const { return rank_; }
  // The spans of this rank's chunks (layers, embedding, head), for logs and tests.
  std::vector<model::ModelSpan> spans() const;

 private:
  struct Step;
  void run_forward(Step& st, const PipeAction& a);
  void run_backward(Step& st, const PipeAction& a);
  // The activation that crosses between stages for a micro-batch of `rows` sequences: [rows, T', D].
  std::vector<int64_t> activation_shape(int64_t rows, int64_t seq_len) const;
  at::Tensor broadcast_loss(at::Tensor loss_sum);
  void write_trace() const;

  comm::CommPtr pp_;
  int rank_ = 0, world_rank_ = 0;
  at::Device device_;
  std::vector<std::unique_ptr<ParallelModel>> chunks_;
  std::unique_ptr<PipelineLinks> links_;
  std::unique_ptr<TiedEmbedding> tied_;  // inactive without model.tie_embeddings
  PipelineSchedule schedule_;
  int64_t d_model_ = 0, sp_split_ = 1;  // T' = T / sp_split_ under sequence parallelism
  std::string trace_path_;
  int64_t trace_step_ = 0, steps_run_ = 0;
  PipelineStepStats stats_;
};

}  // namespace meshtrain::parallel
