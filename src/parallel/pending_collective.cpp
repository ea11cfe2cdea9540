#include "meshtrain/parallel/pending_collective.h"

#include <ATen/ATen.h>

#include <functional>

namespace meshtrain::parallel {
namespace {

bool needs_staging(comm::Communicator& c, const at::Tensor& t) {
  return !t.device().is_cpu() && c.backend_name() == "cpu";
}

}  // namespace

PendingCollective PendingCollective::all_reduce(comm::Communicator& c, at::Tensor tensor, comm::ReduceOp op) {
  PendingCollective p;
  p.started_ = true;
  if (c.size() == 1) return p;  // sum/avg/max/min of one rank's tensor is that tensor
  if (needs_staging(c, tensor)) {
    p.target_ = tensor;
    p.staged_out_ = tensor.cpu();
    p.work_ = c.all_reduce(p.staged_out_, op);
  } else {
    p.staged_in_ = tensor;  // kept alive until finish
    p.work_ = c.all_reduce(p.staged_in_, op);
  }
  return p;
}

// all_gather and reduce_scatter: `out` and `in` differ in size. With one rank both ops copy `in` to `out`
// and `op` is not called; otherwise `op(staged_out, staged_in)` is started on host copies when the CPU
// backend gets device tensors, else on the tensors themselves (kept alive until finish).
PendingCollective PendingCollective::start_out_of_place(
    comm::Communicator& c, at::Tensor out, at::Tensor in,
    const std::function<comm::WorkPtr(at::Tensor&, const at::Tensor&)>& op) {
  PendingCollective p;
  p.started_ = true;
  if (c.size() == 1) {
    if (out.data_ptr() != in.data_ptr()) out.copy_(in.reshape_as(out));  // same memory: nothing to move
    return p;
  }
  if (needs_staging(c, out)) {
    p.target_ = out;
    p.staged_out_ = at::empty(out.sizes(), out.options().device(at::kCPU));
    p.staged_in_ = in.cpu();
  } else {
    p.staged_out_ = out;
    p.staged_in_ = in;
  }
  p.work_ = op(p.staged_out_, p.staged_in_);
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
  if (target_.defined()) target_.copy_(staged_out_);
  finished_ = true;
  work_.reset();
  target_ = staged_out_ = staged_in_ = at::Tensor();
}

}  // namespace meshtrain::parallel
