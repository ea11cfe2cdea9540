#include "meshtrain/parallel/ddp/data_parallel.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/post_accumulate_hook.h"

namespace meshtrain::parallel {
namespace {

int64_t mib_to_bytes(double mb) { return std::max<int64_t>(1, static_cast<int64_t>(mb * 1024 * 1024)); }

}  // namespace

DataParallel::DataParallel(std::vector<Param> params, comm::CommPtr comm, DataParallelOptions opts)
    : params_(std::move(params)), comm_(std::move(comm)), opts_(opts) {
  MT_CHECK(comm_, "DataParallel needs a communicator");
  for (const auto& p : params_)
    MT_CHECK(p.param.is_leaf(), "DataParallel: '", p.name, "' is not a leaf parameter");
  views_.resize(params_.size());
  bucket_of_.resize(params_.size());
  seen_.assign(params_.size(), 0);
  assign_buckets();
  reset_counts();
  for (size_t k = 0; k < params_.size(); ++k)
    if (bucketed(k)) set_post_accumulate_hook(params_[k].param, [this, k] { on_gradient(k); });
}

void DataParallel::assign_buckets() {
  // Reverse registration order, a new bucket when full or when dtype/device change.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k].param;
    if (!p.requires_grad()) continue;  // frozen: no gradient to reduce
    const int64_t nb = p.numel() * p.element_size();
    const int64_t cap = mib_to_bytes(groups.size() <= 1 ? opts_.first_bucket_mb : opts_.bucket_mb);
    const bool same_kind = !groups.empty() && params_[groups.back().front()].param.scalar_type() == p.scalar_type() &&
                           params_[groups.back().front()].param.device() == p.device();
    if (groups.empty() || !same_kind || (bytes + nb > cap && bytes > 0)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += nb;
  }
  for (auto& g : groups) {
    Bucket b;
    b.params = std::move(g);
    int64_t n = 0;
    for (size_t k : b.params) n += params_[k].param.numel();
    const auto& first = params_[b.params.front()].param;
    b.buffer = at::zeros({n}, first.options().requires_grad(false));
    int64_t off = 0;
    for (size_t k : b.params) {
      auto& p = params_[k].param;
      views_[k] = b.buffer.narrow(0, off, p.numel()).view(p.sizes());
      bucket_of_[k] = buckets_.size();
      off += p.numel();
      // Gradients live in the bucket from the start: autograd accumulates into a defined .grad in place.
      p.mutable_grad() = views_[k];
    }
    buckets_.push_back(std::move(b));
  }
}

DataParallel::~DataParallel() {
  for (size_t k = 0; k < params_.size(); ++k)
    if (bucketed(k)) clear_post_accumulate_hook(params_[k].param);
}

void DataParallel::reset_counts() {
  for (auto& b : buckets_) b.pending = b.params.size();
  std::fill(seen_.begin(), seen_.end(), 0);
  next_launch_ = 0;
}

void DataParallel::on_gradient(size_t k) {
  auto& p = params_[k].param;
  // The optimizer (or a user) may have replaced .grad: bring the gradient back into the bucket.
  if (!p.grad().is_same(views_[k])) {
    at::NoGradGuard no_grad;
    if (p.grad().defined()) views_[k].copy_(p.grad());
    p.mutable_grad() = views_[k];
  }
  if (!requires_sync_ || seen_[k]) return;
  seen_[k] = 1;
  synced_ = false;
  if (--buckets_[bucket_of_[k]].pending == 0) launch_ready_buckets();
}

void DataParallel::launch_ready_buckets() {
  at::NoGradGuard no_grad;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    at::Tensor t = b.buffer;
    if (opts_.reduce_dtype != b.buffer.scalar_type() && comm_->size() > 1) {
      b.reduce_buffer = b.buffer.to(opts_.reduce_dtype);
      t = b.reduce_buffer;
    }
    b.op = PendingCollective::all_reduce(*comm_, t, comm::ReduceOp::Avg);
  }
}

void DataParallel::finish_gradient_sync() {
  if (synced_) return;
  // Buckets still waiting hold parameters whose gradient never landed.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (seen_[k] || !bucketed(k)) continue;
    MT_USER_CHECK(opts_.allow_unused, "data parallel: parameter '", params_[k].name,
                  "' received no gradient in this backward pass; every parameter must take part in the loss "
                  "(or set parallel.allow_unused_params: true)");
    // An unused parameter contributes zeros (its bucket slice keeps what it accumulated, normally zeros).
    params_[k].param.mutable_grad() = views_[k];
    seen_[k] = 1;
    --buckets_[bucket_of_[k]].pending;
  }
  launch_ready_buckets();
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    b.op.finish();
    if (b.reduce_buffer.defined()) {
      b.buffer.copy_(b.reduce_buffer);
      b.reduce_buffer = at::Tensor();
    }
    b.op = PendingCollective();
    if (on_reduced_)
      for (size_t k : b.params) on_reduced_(k);
  }
  reset_counts();
  synced_ = true;
}

void DataParallel::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) b.buffer.zero_();
  for (size_t k = 0; k < params_.size(); ++k)
    if (bucketed(k)) params_[k].param.mutable_grad() = views_[k];
}

void DataParallel::broadcast_parameters() {
  if (comm_->size() == 1) return;
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    at::Tensor t = p.param.detach();
    comm_->broadcast(t, 0)->wait();
  }
}

std::vector<std::vector<std::string>> DataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].name);
  }
  return out;
}

}  // namespace meshtrain::parallel
