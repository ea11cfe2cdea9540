#include "meshtrain/parallel/parallel_model.h"

#include <ATen/ATen.h>

namespace meshtrain::parallel {

void ParallelModel::clip_to(const std::vector<at::Tensor>& grads, const at::Tensor& total, double max_norm) {
  if (max_norm <= 0 || grads.empty()) return;
  at::NoGradGuard no_grad;
  auto scale = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  at::_foreach_mul_(grads, scale);
}

std::string ParallelModel::tp_prefix() const { return tp_ ? tp_->describe() + " × " : ""; }

}  // namespace meshtrain::parallel
