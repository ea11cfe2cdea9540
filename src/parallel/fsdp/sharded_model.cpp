#include "meshtrain/parallel/fsdp/sharded_model.h"

#include <ATen/ATen.h>

#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ShardedModel::ShardedModel(model::Transformer net, int64_t seed, const at::Device& device, comm::CommPtr shard,
                           comm::CommPtr replicate, const FullyShardOptions& opts, model::BlockRunner inner,
                           std::shared_ptr<const TensorParallel> tp)
    : ParallelModel(std::move(net), std::move(tp)) {
  const int shards = shard->size(), replicas = replicate ? replicate->size() : 1;
  shard_ = std::make_unique<FullyShard>(*net_, seed, device, std::move(shard), std::move(replicate), opts, tp_);
  // FSDP outside, activation checkpointing inside: the recomputation runs while the block is gathered.
  net_->set_block_runner(model::compose(shard_->block_runner(), std::move(inner)));
  describe_ = tp_prefix() + (opts.zero_stage == 3
                  ? cat(replicas > 1 ? "hsdp" : "fsdp", " over ", shards, " shard(s)",
                        replicas > 1 ? cat(" × ", replicas, " replicas") : "",
                        opts.reshard_after_forward ? "" : ", no reshard after forward")
                  : cat("zero-", opts.zero_stage, " over ", shards, " rank(s)"));
}

at::Tensor ShardedModel::loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs) {
  shard_->pre_forward();
  return net_->loss(tokens, targets, docs);
}

void ShardedModel::backward(const at::Tensor& loss, bool sync) { stage_backward(loss, at::Tensor(), sync); }

void ShardedModel::stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync) {
  shard_->set_requires_sync(sync);
  shard_->ensure_root_gathered();
  out.backward(grad);
  shard_->finish_gradient_sync();
  if (!sync || !tp_ || tp_->partial_gradients().empty()) return;
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : shard_->shard_parameters()) grads[p.name] = p.trains ? p.shard.grad() : at::Tensor();
  tp_->finish_gradients([&](const std::string& name) { return grads.at(name); });
}

std::vector<ParallelModel::OptimParam> ShardedModel::optimizer_params() const {
  std::vector<OptimParam> out;
  for (const auto& p : shard_->shard_parameters())
    if (p.trains) out.push_back({p.name, p.shard, decays(p.name, p.shard.dim())});  // frozen: nothing to update
  return out;
}

bool ShardedModel::stream_gradients(GradientSink& sink) {
  return shard_->stream_gradients(sink, autocast_ ? at::kBFloat16 : at::kFloat);
}

at::Tensor ShardedModel::clip_grad_norm(double max_norm) {
  auto total = shard_->grad_norm_squared().sqrt();
  if (shard_->streaming()) {
    MT_CHECK(max_norm == 0, "ShardedModel: streamed gradients are clipped by the optimizer, not in place");
    return total;
  }
  std::vector<at::Tensor> grads;
  for (const auto& p : shard_->shard_parameters())
    if (p.trains && p.shard.grad().defined() && p.shard.numel() > 0) grads.push_back(p.shard.grad());
  clip_to(grads, total, max_norm);
  return total;
}

void ShardedModel::after_optimizer_step() {
  shard_->zero_grad();
  shard_->mark_parameters_stale();
}

}  // namespace meshtrain::parallel
