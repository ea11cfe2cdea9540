// ReplicatedModel: every rank holds the whole model — a single process (no reducer), or data parallel with
// the bucketed, backward-overlapped gradient all-reduce of parallel/ddp/data_parallel.h. Under tensor parallelism
// "the whole model" is this rank's TP blocks, replicated over the dp group (DDP over TP-sharded models): the
// gradient norm then sums the TP blocks over the tp group, and sequence parallelism's partial gradients are
// summed over tp after the synced backward.
#pragma once

#include <memory>

#include "meshtrain/parallel/ddp/data_parallel.h"
#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::parallel {

class ReplicatedModel : public ParallelModel {
 public:
  // `net` must be materialised (TP already applied when `tp` is given). `dp` null: no reduction.
  ReplicatedModel(model::Transformer net, comm::CommPtr dp, const DataParallelOptions& opts,
                  std::shared_ptr<const TensorParallel> tp = nullptr);
  ~ReplicatedModel() override;  // removes the streaming hooks

  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  const model::Documents* docs = nullptr) override;
  void backward(const at::Tensor& loss, bool sync) override;
  void stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync) override;
  std::vector<OptimParam> optimizer_params() const override;
  at::Tensor clip_grad_norm(double max_norm) override;
  void after_optimizer_step() override;
  void broadcast_parameters() override;
  // Trainable parameters cast to the compute dtype; without a reducer each gradient goes to the sink from
  // its post-accumulate hook and is dropped, with one each micro-batch's buckets are averaged (the backward
  // syncs every micro-batch, so nothing accumulates on the device) and handed over as they finish. Not
  // under tensor parallelism (false).
  bool stream_gradients(GradientSink& sink) override;
  // Trainable parameters cast to the compute dtype; their gradients accumulate in it (in DDP's buckets, built
  // anew in that dtype). Not under tensor parallelism (false).
  bool hold_gradients() override;
  std::vector<ShardedTensor> sharded_parameters() const override;
  std::string describe() const override;
  bool replicated() const override { return !tp_; }
  // A single process: no reducer hooks or tensor-parallel collectives in backward.
  bool capturable() const override { return !reducer_ && !tp_; }

  DataParallel* reducer() { return reducer_.get(); }

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  // Builds the reducer over params_ (when there is a dp group).
  void make_reducer();
  // Casts the trainable parameters to the compute dtype (streamed or held offload) and rebuilds the reducer.
  void hold_in_compute_dtype();
  // The optimizer parameter index of params_[k] (frozen ones: none).
  size_t optimizer_index(size_t k) const;

  comm::CommPtr dp_;
  DataParallelOptions opts_;
  std::unique_ptr<DataParallel> reducer_;
  GradientSink* sink_ = nullptr;  // set by stream_gradients()
};

}  // namespace meshtrain::parallel
