#include "meshtrain/parallel/data_parallel.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

DataParallel::DataParallel(std::vector<Param> params, comm::CommPtr comm, double bucket_mb)
    : params_(std::move(params)), comm_(std::move(comm)) {
  MT_CHECK(comm_, "DataParallel needs a communicator");
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024));
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k].param;
    const int64_t nb = p.numel() * p.element_size();
    const bool same_kind = !buckets_.empty() && !buckets_.back().empty() &&
                           params_[buckets_.back().front()].param.scalar_type() == p.scalar_type() &&
                           params_[buckets_.back().front()].param.device() == p.device();
    if (buckets_.empty() || !same_kind || bytes + nb > cap) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(k);
    bytes += nb;
  }
}

void DataParallel::broadcast_parameters() {
  if (comm_->size() == 1) return;
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    // The CPU backend works on host memory; device tensors are staged through it.
    const bool stage = !p.param.device().is_cpu() && comm_->backend_name() == "cpu";
    at::Tensor t = stage ? p.param.detach().cpu() : p.param.detach();
    comm_->broadcast(t, 0)->wait();
    if (stage) p.param.detach().copy_(t);
  }
}

void DataParallel::average_gradients() {
  if (comm_->size() == 1) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flats(buckets_.size());
  std::vector<comm::WorkPtr> works(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<at::Tensor> grads;
    for (size_t k : buckets_[b]) {
      const auto& g = params_[k].param.grad();
      MT_CHECK(g.defined(), "data parallel: parameter '", params_[k].name,
               "' received no gradient on this rank; every parameter must take part in the loss");
      grads.push_back(g.reshape({-1}));
    }
    flats[b] = at::cat(grads);
    if (!flats[b].device().is_cpu() && comm_->backend_name() == "cpu") flats[b] = flats[b].cpu();
    works[b] = comm_->all_reduce(flats[b], comm::ReduceOp::Avg);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    works[b]->wait();
    int64_t off = 0;
    for (size_t k : buckets_[b]) {
      auto g = params_[k].param.mutable_grad();
      g.copy_(flats[b].narrow(0, off, g.numel()).view_as(g));
      off += g.numel();
    }
  }
}

}  // namespace meshtrain::parallel
