// Plain (non-autograd) collectives over a tensor-parallel group along one tensor dim, shared by the region
// functions and the vocab-parallel layers. Private to src/parallel. Every result is a new tensor (never the
// input): autograd functions must not hand back a tensor they modified in place.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel::detail {

// Holds a communicator in an autograd graph (ctx->saved_data) until backward ran.
at::IValue comm_capsule(const comm::CommPtr& c);
comm::CommPtr comm_from_capsule(const at::IValue& v);

// The reduction over the group of `x` (a copy).
at::Tensor all_reduce(const at::Tensor& x, comm::Communicator& c, comm::ReduceOp op = comm::ReduceOp::Sum);
// Every rank's `x` concatenated along `dim` in rank order.
at::Tensor all_gather(const at::Tensor& x, int64_t dim, comm::Communicator& c);
// This rank's chunk (of size(dim) / group size) of `x` along `dim`, contiguous.
at::Tensor split(const at::Tensor& x, int64_t dim, comm::Communicator& c);
// This rank's chunk along `dim` of the sum of every rank's `x`.
at::Tensor reduce_scatter(const at::Tensor& x, int64_t dim, comm::Communicator& c);

}  // namespace meshtrain::parallel::detail
