#include "meshtrain/parallel/ddp/replicated_model.h"

#include <ATen/ATen.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_module.h"
#include "meshtrain/parallel/post_accumulate_hook.h"

namespace meshtrain::parallel {

ReplicatedModel::ReplicatedModel(model::Transformer net, comm::CommPtr dp, const DataParallelOptions& opts,
                                 std::shared_ptr<const TensorParallel> tp)
    : ParallelModel(std::move(net), std::move(tp)), dp_(std::move(dp)), opts_(opts) {
  for (const auto& item : net_->named_parameters()) {
    MT_CHECK(!item.value().is_meta(), "ReplicatedModel: parameter ", item.key(), " is not materialised");
    params_.emplace_back(item.key(), item.value());
  }
  make_reducer();
}

ReplicatedModel::~ReplicatedModel() {
  if (!sink_ || reducer_) return;
  for (const auto& [name, p] : params_)
    if (p.requires_grad()) clear_post_accumulate_hook(p);
}

void ReplicatedModel::make_reducer() {
  reducer_.reset();  // its hooks go before the new ones are set
  if (!dp_) return;
  std::vector<DataParallel::Param> dp_params;
  for (const auto& [name, p] : params_) dp_params.push_back({name, p});
  reducer_ = std::make_unique<DataParallel>(std::move(dp_params), dp_, opts_);
}

size_t ReplicatedModel::optimizer_index(size_t k) const {
  size_t index = 0;
  for (size_t j = 0; j < k; ++j) index += params_[j].second.requires_grad() ? 1 : 0;
  return index;
}

bool ReplicatedModel::stream_gradients(GradientSink& sink) {
  // Sequence parallelism's partial gradients are summed over tp after the synced backward: not streamed yet.
  if (tp_) return false;
  MT_CHECK(!sink_, "ReplicatedModel: gradients are streamed already");
  sink_ = &sink;
  hold_in_compute_dtype();
  std::vector<size_t> index(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) index[k] = optimizer_index(k);
  if (reducer_) {
    reducer_->on_reduced([this, index](size_t k) { sink_->take_gradient(index[k], params_[k].second.grad()); });
    return true;
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    at::Tensor p = params_[k].second;
    if (!p.requires_grad()) continue;
    // Runs right after autograd accumulated the gradient: hand it over and drop it, so the device holds one
    // parameter's gradient at a time (plus what backward has not consumed yet).
    set_post_accumulate_hook(p, [this, k, i = index[k]] {
      at::Tensor& param = params_[k].second;
      sink_->take_gradient(i, param.grad());
      param.mutable_grad() = at::Tensor();
    });
  }
  return true;
}

bool ReplicatedModel::hold_gradients() {
  if (tp_) return false;  // as for streaming: sequence parallelism's partial gradients are summed after the backward
  MT_CHECK(!sink_, "ReplicatedModel: gradients are streamed already");
  hold_in_compute_dtype();
  return true;
}

void ReplicatedModel::hold_in_compute_dtype() {
  const at::ScalarType dtype = autocast_ ? at::kBFloat16 : at::kFloat;
  // Let go of the fp32 parameters first (as the optimizer does, OffloadedAdamW::switch_parameters): each is then
  // freed as soon as its cast replaces it, and setting up peaks at 4 bytes a parameter, not 4 + 2.
  reducer_.reset();
  params_.clear();
  {
    at::NoGradGuard no_grad;
    model::replace_parameters(*net_, [&](const std::string&, const at::Tensor& p) {
      if (!p.requires_grad() || p.scalar_type() == dtype) return p;
      return p.to(dtype).requires_grad_(true);
    });
  }
  params_.clear();
  for (const auto& item : net_->named_parameters()) params_.emplace_back(item.key(), item.value());
  make_reducer();
}

at::Tensor ReplicatedModel::loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs) {
  return net_->loss(tokens, targets, docs);
}

void ReplicatedModel::backward(const at::Tensor& loss, bool sync) { stage_backward(loss, at::Tensor(), sync); }

void ReplicatedModel::stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync) {
  if (sink_ && reducer_) {
    // Every micro-batch is averaged and leaves the device; its buckets start from zero once the previous
    // micro-batch's copies out of them ran.
    sync = true;
    sink_->before_reuse();
    reducer_->zero_grad();
  }
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
  if (sink_) {
    // The gradients are on the host, accumulated in fp32: the sink sums their squares. Replicas hold the
    // same averages, so the local norm is the global one (no TP here).
    MT_CHECK(max_norm == 0, "ReplicatedModel: streamed gradients are clipped by the optimizer, not in place");
    double sq = 0;
    size_t index = 0;
    for (const auto& [name, p] : params_)
      if (p.requires_grad()) sq += sink_->squared_norm(index++);
    return at::scalar_tensor(std::sqrt(sq), at::kFloat);
  }
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
