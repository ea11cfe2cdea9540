#include "meshtrain/parallel/full_tensor.h"

#include <ATen/ATen.h>

#include "meshtrain/parallel/pending_collective.h"

namespace meshtrain::parallel {

at::Tensor block_of(const at::Tensor& full, const ShardedTensor& s) {
  at::Tensor b = full;
  for (size_t d = 0; d < s.offsets.size(); ++d) b = b.narrow(static_cast<int64_t>(d), s.offsets[d], s.local.size(d));
  return b;
}

at::Tensor assemble_full(const ShardedTensor& s, comm::Communicator* world) {
  if (!world) return s.local;
  at::NoGradGuard no_grad;
  auto full = at::zeros(s.global_shape, s.local.options().requires_grad(false));
  if (s.write) block_of(full, s).copy_(s.local);
  PendingCollective::all_reduce(*world, full, comm::ReduceOp::Sum).finish();
  return full;
}

}  // namespace meshtrain::parallel
