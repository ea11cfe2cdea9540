// ShardedModel: ZeRO-1/2, FSDP and HSDP (parallel/fsdp/fully_shard.h) behind the ParallelModel interface; the
// optimizer runs on this rank's fp32 shards only. With a TensorParallel layout (FSDP × TP) the shards are
// chunks of this rank's TP blocks, and sequence parallelism's partial gradients are summed over tp on the
// shard gradients after the synced backward.
#pragma once

#include <memory>

#include "meshtrain/parallel/fsdp/fully_shard.h"
#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::parallel {

class ShardedModel : public ParallelModel {
 public:
  // `net` built on the meta device; `inner` a BlockRunner to run inside FSDP's (activation checkpointing).
  ShardedModel(model::Transformer net, int64_t seed, const at::Device& device, comm::CommPtr shard,
               comm::CommPtr replicate, const FullyShardOptions& opts, model::BlockRunner inner,
               std::shared_ptr<const TensorParallel> tp = nullptr);

  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  const model::Documents* docs = nullptr) override;
  void backward(const at::Tensor& loss, bool sync) override;
  void stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync) override;
  std::vector<OptimParam> optimizer_params() const override;
  at::Tensor clip_grad_norm(double max_norm) override;
  void after_optimizer_step() override;
  // FSDP/HSDP without tensor parallelism (FullyShard::stream_gradients): the shards in the compute dtype
  // (bf16 under bf16 compute), each unit's reduced shard gradient handed over during the backward.
  bool stream_gradients(GradientSink& sink) override;
  int64_t gradient_shards() const override { return shard_->shard_ranks(); }
  std::vector<ShardedTensor> sharded_parameters() const override { return shard_->sharded_parameters(); }
  std::string describe() const override { return describe_; }

  FullyShard& fully_shard() { return *shard_; }
  const FullyShard& fully_shard() const { return *shard_; }

 protected:
  void gather_full_parameters() override { shard_->gather_all(); }
  void before_forward() override { shard_->pre_forward(); }

 private:
  std::unique_ptr<FullyShard> shard_;
  std::string describe_;
};

}  // namespace meshtrain::parallel
