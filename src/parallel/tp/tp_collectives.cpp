#include "parallel/tp/tp_collectives.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel::detail {
namespace {

struct CommHolder : torch::CustomClassHolder {
  explicit CommHolder(comm::CommPtr c) : comm(std::move(c)) {}
  comm::CommPtr comm;
};

int64_t checked_chunk(const at::Tensor& x, int64_t dim, const comm::Communicator& c) {
  const int64_t n = x.size(dim), p = c.size();
  MT_USER_CHECK(n % p == 0, "tensor parallel: size ", n, " of dim ", dim, " (", dim == 1 ? "sequence" : "features",
                ") is not divisible by the tensor-parallel size ", p, " (", n, " % ", p, " = ", n % p, ")");
  return n / p;
}

}  // namespace

at::IValue comm_capsule(const comm::CommPtr& c) { return at::IValue::make_capsule(c10::make_intrusive<CommHolder>(c)); }

comm::CommPtr comm_from_capsule(const at::IValue& v) {
  return c10::static_intrusive_pointer_cast<CommHolder>(v.toCapsule())->comm;
}

at::Tensor all_reduce(const at::Tensor& x, comm::Communicator& c, comm::ReduceOp op) {
  auto y = x.clone(at::MemoryFormat::Contiguous);
  c.all_reduce(y, op)->wait();
  return y;
}

at::Tensor all_gather(const at::Tensor& x, int64_t dim, comm::Communicator& c) {
  auto in = x.contiguous();
  std::vector<int64_t> shape{c.size()};
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  auto out = at::empty(shape, x.options());  // [P, ...x]: rank r's block at out[r]
  c.all_gather_into(out, in)->wait();
  return at::cat(out.unbind(0), dim);
}

at::Tensor split(const at::Tensor& x, int64_t dim, comm::Communicator& c) {
  const int64_t n = checked_chunk(x, dim, c);
  return x.narrow(dim, c.rank() * n, n).contiguous();
}

at::Tensor reduce_scatter(const at::Tensor& x, int64_t dim, comm::Communicator& c) {
  checked_chunk(x, dim, c);
  // reduce_scatter_into hands rank r the r-th contiguous chunk of the flat input: lay the dim-chunks out
  // one after another.
  auto in = at::stack(x.chunk(c.size(), dim), 0).contiguous();  // [P, ...chunk]
  auto out = at::empty(in.sizes().slice(1), x.options());
  c.reduce_scatter_into(out, in, comm::ReduceOp::Sum)->wait();
  return out;
}

}  // namespace meshtrain::parallel::detail
