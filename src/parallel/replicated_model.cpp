#include "meshtrain/parallel/replicated_model.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ReplicatedModel::ReplicatedModel(model::Transformer net, comm::CommPtr dp, const DataParallelOptions& opts,
                                 std::shared_ptr<const TensorParallel> tp)
    : ParallelModel(std::move(net), std::move(tp)), dp_(std::move(dp)) {
  std::vector<DataParallel::Param> dp_params;
  for (const auto& item : net_->named_parameters()) {
    MT_CHECK(!item.value().is_meta(), "ReplicatedModel: parameter ", item.key(), " is not materialised");
    params_.emplace_back(item.key(), item.value());
    dp_params.push_back({item.key(), item.value()});
  }
  if (dp_) reducer_ = std::make_unique<DataParallel>(std::move(dp_params), dp_, opts);
}

at::Tensor ReplicatedModel::loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs) {
  return net_->loss(tokens, targets, docs);
}

void ReplicatedModel::backward(const at::Tensor& loss, bool sync) { stage_backward(loss, at::Tensor(), sync); }

void ReplicatedModel::stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync) {
  if (reducer_) reducer_->set_requires_sync(sync);
  out.backward(grad);
  if (!sync) return;
  if (reducer_) reducer_->finish_gradient_sync();
  // Sums over tp commute with the average over dp: after it is as right as before.
  if (tp_) tp_->finish_gradients(*net_);
}

std::vector<ParallelModel::OptimParam> ReplicatedModel::optimizer_params() const {
  std::vector<OptimParam> out;
  for (const auto& [name, p] : params_)
    if (p.requires_grad()) out.push_back({name, p, decays(name, p.dim())});  // frozen: nothing to update
  return out;
}

at::Tensor ReplicatedModel::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> grads, counted;
  for (const auto& [name, p] : params_) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    if (!tp_ || tp_->counts(name)) counted.push_back(p.grad());
  }
  if (grads.empty()) return at::zeros({});
  // Replicas hold identical gradients after the all-reduce: the local norm is the global one. Under TP the
  // squares of the blocks are summed over tp, each TP-replicated parameter counted on tp rank 0 only.
  at::Tensor total;
  if (!tp_) {
    total = at::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).norm();
  } else {
    auto sq = counted.empty() ? at::zeros({}, grads[0].options().dtype(at::kFloat))
                              : at::stack(at::_foreach_norm(counted, 2)).to(at::kFloat).pow(2).sum();
    tp_->sum_over_group(sq);
    total = sq.sqrt();
  }
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
  if (tp_) {  // this rank's TP blocks; one replica (dp rank 0) writes them
    out = tp_->sharded_parameters(*net_);
    for (auto& s : out) s.write = s.write && write;
    return out;
  }
  for (const auto& [name, p] : params_)
    out.push_back({name, p.sizes().vec(), std::vector<int64_t>(static_cast<size_t>(p.dim()), 0), p, write});
  return out;
}

std::string ReplicatedModel::describe() const {
  if (!reducer_) return tp_ ? tp_->describe() : "single process";
  return cat(tp_prefix(), "ddp over ", dp_->size(), " rank(s), ", reducer_->num_buckets(), " gradient bucket(s)");
}

}  // namespace meshtrain::parallel
