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
    const MicroBatch& b = batches[i];
    const double weight = b.loss_weight.value_or(-1);  // -1: unweighted, l / count (exactly as before)
    // A micro-batch without an unmasked target has no mean (0 / 0); its backward must still run (the layouts
    // reduce gradients in it), so it runs on one target made valid, weighted 0.
    at::Tensor targets = b.targets;
    if (weight == 0) {
      targets = targets.clone();
      targets.view({-1}).narrow(0, 0, 1).fill_(0);
    }
    const at::Tensor l = train_loss(b.tokens, targets, b.docs.packed() ? &b.docs : nullptr);
    const at::Tensor scaled = weight < 0 ? l / count : l * weight;
    // Gradients are reduced over ranks on the last micro-batch only (overlapped with its backward).
    backward(scaled, /*sync=*/i + 1 == batches.size());
    if (!loss_sum.defined()) loss_sum = at::zeros({}, l.options().dtype(at::kFloat));
    loss_sum += weight < 0 ? l.detach() : scaled.detach() * count;
  }
  return loss_sum;
}

at::Tensor ParallelModel::train_loss(const at::Tensor& tokens, const at::Tensor& targets,
                                     const model::Documents* docs) {
  AutocastGuard ac(autocast_, autocast_device_);
  return loss(tokens, targets, docs);
}

at::Tensor ParallelModel::stage_forward(const at::Tensor& tokens, const at::Tensor& x, const at::Tensor& targets,
                                        const model::Documents* docs) {
  before_forward();
  auto& net = *net_;
  at::Tensor h = net.span().embed ? net.embed(tokens, docs) : x;
  h = net.run_blocks(h, tokens.size(1), docs);
  return net.span().head ? net.head_loss(h, targets) : h;
}

void ParallelModel::stage_backward(const at::Tensor&, const at::Tensor&, bool) {
  MT_CHECK(false, "layout '", describe(), "' cannot run as a pipeline stage");
}

at::Tensor ParallelModel::eval_loss(const at::Tensor& tokens, const at::Tensor& targets,
                                    const model::Documents* docs) {
  at::NoGradGuard no_grad;
  AutocastGuard ac(autocast_, autocast_device_);
  return loss(tokens, targets, docs);
}

GenerationScope ParallelModel::generation_scope() {
  gather_full_parameters();
  return GenerationScope(tp_.get());
}

std::string ParallelModel::tp_prefix() const { return tp_ ? tp_->describe() + " × " : ""; }

}  // namespace meshtrain::parallel
