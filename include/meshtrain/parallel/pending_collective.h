// PendingCollective: one asynchronous collective started by a parallel layer, finished later (start_… /
// finish_… pairs). It owns every tensor the op reads or writes until finish(), so callers can drop theirs.
//
// A group of one rank does no communication here (every collective is the identity, or a copy). Tensors on a
// device the backend does not take are staged by the communicator itself (comm/communicator_factory.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

class PendingCollective {
 public:
  PendingCollective() = default;

  // In place on `tensor`.
  static PendingCollective all_reduce(comm::Communicator& c, at::Tensor tensor, comm::ReduceOp op);
  // `out` [size × n] receives every rank's `in` [n].
  static PendingCollective all_gather(comm::Communicator& c, at::Tensor out, at::Tensor in);
  // `out` [n / size] receives this rank's slice of the reduction of `in` [n].
  static PendingCollective reduce_scatter(comm::Communicator& c, at::Tensor out, at::Tensor in, comm::ReduceOp op);

  bool started() const { return started_; }
  // Waits for the op (its results are then in the tensors on the caller's stream). Idempotent; a no-op when
  // nothing was started.
  void finish();

 private:
  static PendingCollective start_out_of_place(comm::Communicator& c, at::Tensor out, at::Tensor in,
                                              const std::function<comm::WorkPtr(at::Tensor&, const at::Tensor&)>& op);

  bool started_ = false, finished_ = false;
  comm::WorkPtr work_;
  at::Tensor out_, in_;  // what the op writes and reads, alive until finish
};

}  // namespace meshtrain::parallel
