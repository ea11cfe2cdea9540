#include "meshtrain/parallel/replicated_model.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ReplicatedModel::ReplicatedModel(model::Transformer net, comm::CommPtr dp, const DataParallelOptions& opts)
    : ParallelModel(std::move(net)), dp_(std::move(dp)) {
  std::vector<DataParallel::Param> dp_params;
  for (const auto& item : net_->named_parameters()) {
    MT_CHECK(!item.value().is_meta(), "ReplicatedModel: parameter ", item.key(), " is not materialised");
    params_.emplace_back(item.key(), item.value());
    dp_params.push_back({item.key(), item.value()});
  }
  if (dp_) reducer_ = std::make_unique<DataParallel>(std::move(dp_params), dp_, opts);
}

at::Tensor ReplicatedModel::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  return net_->loss(tokens, targets);
}

void ReplicatedModel::backward(const at::Tensor& loss, bool sync) {
  if (reducer_) reducer_->set_requires_sync(sync);
  loss.backward();
  if (reducer_ && sync) reducer_->finish_gradient_sync();
}

std::vector<ParallelModel::OptimParam> ReplicatedModel::optimizer_params() const {
  std::vector<OptimParam> out;
  for (const auto& [name, p] : params_) out.push_back({name, p, decays(name, p.dim())});
  return out;
}

at::Tensor ReplicatedModel::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return at::zeros({});
  // Replicas hold identical gradients after the all-reduce: the local norm is the global one.
  auto total = at::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).norm();
  clip_to(grads, total, max_norm);
  return total;
}

void ReplicatedModel::after_optimizer_step() {
  if (reducer_) {
    reducer_->zero_grad();
    return;
  }
  for (auto& [name, p] : params_) p.mutable_grad() = at::Tensor();
}

void ReplicatedModel::broadcast_parameters() {
  if (reducer_) reducer_->broadcast_parameters();
}

std::vector<ShardedTensor> ReplicatedModel::sharded_parameters() const {
  std::vector<ShardedTensor> out;
  const bool write = !dp_ || dp_->rank() == 0;
  for (const auto& [name, p] : params_)
    out.push_back({name, p.sizes().vec(), std::vector<int64_t>(static_cast<size_t>(p.dim()), 0), p, write});
  return out;
}

std::string ReplicatedModel::describe() const {
  if (!reducer_) return "single process";
  return cat("ddp over ", dp_->size(), " rank(s), ", reducer_->num_buckets(), " gradient bucket(s)");
}

}  // namespace meshtrain::parallel
