// The region functions as autograd Functions. Each backward runs the forward's transpose on the incoming
// gradient; the group travels in the graph (a capsule in saved_data) so backward uses the same communicator
// as forward. A group of one skips autograd entirely: every transition is then the identity.
#include "meshtrain/parallel/tp/tp_regions.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/tp/tp_collectives.h"

namespace meshtrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

comm::CommPtr saved_comm(AutogradContext* ctx) { return detail::comm_from_capsule(ctx->saved_data["comm"]); }

// Defines Name::forward(x) = FWD(x, dim, comm) and Name::backward(g) = BWD(g, dim, comm).
#define MT_TP_REGION(Name, FWD, BWD)                                                                   \
  struct Name : torch::autograd::Function<Name> {                                                      \
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim,                  \
                              const comm::CommPtr& c) {                                                \
      ctx->saved_data["comm"] = detail::comm_capsule(c);                                               \
      ctx->saved_data["dim"] = dim;                                                                    \
      return FWD(x, dim, *c);                                                                          \
    }                                                                                                  \
    static variable_list backward(AutogradContext* ctx, variable_list g) {                             \
      auto c = saved_comm(ctx);                                                                        \
      return {BWD(g[0], ctx->saved_data["dim"].toInt(), *c), at::Tensor(), at::Tensor()};              \
    }                                                                                                  \
  };

// The transitions, all of the form (tensor, dim, group) → new tensor.
at::Tensor pass(const at::Tensor& x, int64_t, comm::Communicator&) { return x.clone(); }
at::Tensor sum_ranks(const at::Tensor& x, int64_t, comm::Communicator& c) { return detail::all_reduce(x, c); }
at::Tensor gather_dim(const at::Tensor& x, int64_t dim, comm::Communicator& c) { return detail::all_gather(x, dim, c); }
at::Tensor split_dim(const at::Tensor& x, int64_t dim, comm::Communicator& c) { return detail::split(x, dim, c); }
at::Tensor reduce_scatter_dim(const at::Tensor& x, int64_t dim, comm::Communicator& c) {
  return detail::reduce_scatter(x, dim, c);
}

MT_TP_REGION(CopyToRegion, pass, sum_ranks)
MT_TP_REGION(ReduceFromRegion, sum_ranks, pass)
MT_TP_REGION(ScatterToRegion, split_dim, gather_dim)
MT_TP_REGION(GatherFromRegion, gather_dim, split_dim)
MT_TP_REGION(ReduceScatterToSeqRegion, reduce_scatter_dim, gather_dim)
MT_TP_REGION(GatherFromSeqRegion, gather_dim, reduce_scatter_dim)
#undef MT_TP_REGION

template <typename F>
at::Tensor apply(const at::Tensor& x, int64_t dim, const comm::CommPtr& tp) {
  if (tp->size() == 1) return x;
  return F::apply(x, dim < 0 ? dim + x.dim() : dim, tp);
}

}  // namespace

at::Tensor copy_to_tp_region(const at::Tensor& x, const comm::CommPtr& tp) { return apply<CopyToRegion>(x, -1, tp); }
at::Tensor reduce_from_tp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<ReduceFromRegion>(x, -1, tp);
}
at::Tensor scatter_to_tp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<ScatterToRegion>(x, -1, tp);
}
at::Tensor gather_from_tp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<GatherFromRegion>(x, -1, tp);
}

// Splitting the sequence is the same transition as splitting features, on another dim.
at::Tensor scatter_to_sp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<ScatterToRegion>(x, kSeqDim, tp);
}
at::Tensor reduce_scatter_to_sp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<ReduceScatterToSeqRegion>(x, kSeqDim, tp);
}
at::Tensor gather_from_sp_region(const at::Tensor& x, const comm::CommPtr& tp) {
  return apply<GatherFromSeqRegion>(x, kSeqDim, tp);
}

}  // namespace meshtrain::parallel
