#include "meshtrain/parallel/pending_collective.h"

#include <ATen/ATen.h>

#include <functional>

namespace meshtrain::parallel {

PendingCollective PendingCollective::all_reduce(comm::Communicator& c, at::Tensor tensor, comm::ReduceOp op) {
  PendingCollective p;
  p.started_ = true;
  if (c.size() == 1) return p;  // sum/avg/max/min of one rank's tensor is that tensor
  p.out_ = tensor;  // kept alive until finish
  p.work_ = c.all_reduce(p.out_, op);
  return p;
}

// all_gather and reduce_scatter: `out` and `in` differ in size. With one rank both ops copy `in` to `out`
// and `op` is not called; otherwise `op(out, in)` is started on the tensors themselves (kept alive until
// finish). A communicator that cannot take them stages them itself (comm/communicator_factory.h).
PendingCollective PendingCollective::start_out_of_place(
    comm::Communicator& c, at::Tensor out, at::Tensor in,
    const std::function<comm::WorkPtr(at::Tensor&, const at::Tensor&)>& op) {
  PendingCollective p;
  p.started_ = true;
  if (c.size() == 1) {
    if (out.data_ptr() != in.data_ptr()) out.copy_(in.reshape_as(out));  // same memory: nothing to move
    return p;
  }
  p.out_ = out;
  p.in_ = in;
  p.work_ = op(p.out_, p.in_);
  return p;
}

PendingCollective PendingCollective::all_gather(comm::Communicator& c, at::Tensor out, at::Tensor in) {
  return start_out_of_place(c, std::move(out), std::move(in), [&c](at::Tensor& o, const at::Tensor& i) {
    return c.all_gather_into(o, i);
  });
}

PendingCollective PendingCollective::reduce_scatter(comm::Communicator& c, at::Tensor out, at::Tensor in,
                                                    comm::ReduceOp op) {
  return start_out_of_place(c, std::move(out), std::move(in), [&c, op](at::Tensor& o, const at::Tensor& i) {
    return c.reduce_scatter_into(o, i, op);
  });
}

void PendingCollective::finish() {
  if (!started_ || finished_) return;
  if (work_) work_->wait();
  finished_ = true;
  work_.reset();
  out_ = in_ = at::Tensor();
}

}  // namespace meshtrain::parallel
