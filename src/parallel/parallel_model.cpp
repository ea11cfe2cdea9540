#include "meshtrain/parallel/parallel_model.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/autocast_guard.h"

namespace meshtrain::parallel {

void ParallelModel::clip_to(const std::vector<at::Tensor>& grads, const at::Tensor& total, double max_norm) {
  if (max_norm <= 0 || grads.empty()) return;
  at::NoGradGuard no_grad;
  auto scale = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  at::_foreach_mul_(grads, scale);
}

at::Tensor ParallelModel::forward_backward(const std::vector<MicroBatch>& batches) {
  MT_CHECK(!batches.empty(), "forward_backward: no micro-batches");
  const double count = static_cast<double>(batches.size());
  at::Tensor loss_sum;
  for (size_t i = 0; i < batches.size(); ++i) {
    at::Tensor l;
    {
      AutocastGuard ac(autocast_, autocast_device_);
      l = loss(batches[i].tokens, batches[i].targets);
    }
    // Gradients are reduced over ranks on the last micro-batch only (overlapped with its backward).
    backward(l / count, /*sync=*/i + 1 == batches.size());
    if (!loss_sum.defined()) loss_sum = at::zeros({}, l.options().dtype(at::kFloat));
    loss_sum += l.detach();
  }
  return loss_sum;
}

at::Tensor ParallelModel::stage_forward(const at::Tensor& tokens, const at::Tensor& x, const at::Tensor& targets) {
  before_forward();
  auto& net = *net_;
  at::Tensor h = net.span().embed ? net.embed(tokens) : x;
  h = net.run_blocks(h, tokens.size(1));
  return net.span().head ? net.head_loss(h, targets) : h;
}

void ParallelModel::stage_backward(const at::Tensor&, const at::Tensor&, bool) {
  MT_CHECK(false, "layout '", describe(), "' cannot run as a pipeline stage");
}

at::Tensor ParallelModel::eval_loss(const at::Tensor& tokens, const at::Tensor& targets) {
  at::NoGradGuard no_grad;
  AutocastGuard ac(autocast_, autocast_device_);
  return loss(tokens, targets);
}

GenerationScope ParallelModel::generation_scope() {
  gather_full_parameters();
  return GenerationScope(tp_.get());
}

std::string ParallelModel::tp_prefix() const { return tp_ ? tp_->describe() + " × " : ""; }

}  // namespace meshtrain::parallel
