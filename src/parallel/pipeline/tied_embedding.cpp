#include "parallel/pipeline/tied_embedding.h"

#include <ATen/ATen.h>

#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

TiedEmbedding::TiedEmbedding(const comm::CommPtr& pp, comm::CommPtr world, bool tied,
                             const std::vector<std::unique_ptr<ParallelModel>>& chunks) {
  if (!tied) return;
  MT_CHECK(pp && world, "TiedEmbedding: a pipeline without its pp or world group");
  world_ = std::move(world);
  const int r = pp->rank(), last = pp->size() - 1;
  // Key = pp rank: the first stage is rank 0 of the pair, the broadcast's root.
  pair_ = pp->split(r == 0 || r == last ? 0 : -1, r);
  for (const auto& c : chunks) {
    const model::ModelSpan& span = c->net()->span();
    if ((r == 0 && span.embed) || (r == last && span.head)) copy_ = c.get();
  }
  last_ = r == last;
  MT_CHECK(!pair_ || copy_, "TiedEmbedding: pp rank ", r, " holds neither the first nor the last stage");
}

void TiedEmbedding::sum_gradients() {
  if (!pair_) return;
  for (const auto& p : copy_->optimizer_params()) {  // a frozen weight has no entry (on both stages alike)
    if (p.name != kName || p.param.numel() == 0) continue;  // an empty FSDP block is empty on both stages
    at::Tensor g = p.param.grad();
    MT_CHECK(g.defined(), "TiedEmbedding: ", kName, " trains but has no gradient after the backward");
    pair_->all_reduce(g, comm::ReduceOp::Sum)->wait();
  }
}

at::Tensor TiedEmbedding::counted_twice(const at::Device& device) {
  at::NoGradGuard no_grad;
  at::Tensor sq = at::zeros({}, at::TensorOptions().device(device).dtype(at::kFloat));
  if (last_ && copy_)
    for (const auto& s : copy_->sharded_parameters())
      if (s.name == kName && s.write && s.local.grad().defined())
        sq += s.local.grad().to(at::kFloat).square().sum();
  world_->all_reduce(sq, comm::ReduceOp::Sum)->wait();
  return sq;
}

void TiedEmbedding::broadcast() {
  if (!pair_) return;
  at::NoGradGuard no_grad;
  for (auto& s : copy_->sharded_parameters()) {
    if (s.name != kName || s.local.numel() == 0) continue;
    pair_->broadcast(s.local, 0)->wait();
  }
}

}  // namespace meshtrain::parallel
