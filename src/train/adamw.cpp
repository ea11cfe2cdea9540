#include "meshtrain/train/adamw.h"

#include <ATen/ATen.h>

#include <optional>

#include "meshtrain/core/error.h"
#include "meshtrain/model/kernels/fused_adamw.h"

namespace meshtrain::train {
namespace {

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

}  // namespace

AdamW::AdamW(std::vector<Param> params, const OptimizerConfig& cfg) : Optimizer(std::move(params)), cfg_(cfg) {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p.param));
    exp_avg_sq_.push_back(at::zeros_like(p.param));
    // The fused kernel reads the step count from a float tensor on the parameter's device.
    step_.push_back(at::zeros({}, p.param.options().dtype(at::kFloat)));
  }
}

void AdamW::step(double lr, double /*grad_scale: the layout clipped already*/) { update(lr, {}, {}); }

void AdamW::device_step(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip) {
  MT_CHECK(skip.defined() && skip.dim() == 0 && skip.scalar_type() == at::kFloat,
           "AdamW::device_step: the skip flag must be an fp32 scalar tensor");
  update(lr, grad_divisor, skip);
}

void AdamW::update(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip) {
  at::NoGradGuard no_grad;
  // A skipped step counts 0 (1 - skip), as torch's GradScaler makes the fused optimizers do, without a host read.
  const at::Tensor count = skip.defined() ? 1.0 - skip : at::Tensor();
  for (int decay = 0; decay < 2; ++decay) {
    std::vector<at::Tensor> ps, gs, m, v, st;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (p.decay != static_cast<bool>(decay) || !p.param.grad().defined()) continue;
      ps.push_back(p.param);
      gs.push_back(p.param.grad());
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      st.push_back(step_[i]);
    }
    if (ps.empty()) continue;
    // The fused kernel does not count steps itself (torch.optim increments before calling it too).
    if (count.defined())
      at::_foreach_add_(st, count);
    else
      at::_foreach_add_(st, 1.0);
    const double weight_decay = decay ? cfg_.weight_decay : 0.0;
    // On CUDA meshtrain's kernel (optimizer.fused_kernel): the same arithmetic, one pass a parameter.
    const model::AdamWSettings settings{lr, cfg_.beta1, cfg_.beta2, weight_decay, cfg_.eps};
    if (cfg_.fused_kernel && model::fused_adamw({ps, gs, m, v, st}, settings, grad_divisor, skip)) continue;
    // grad_scale: each gradient is divided by it inside the kernel (and written back so). found_inf: where it
    // is exactly 1 the kernel returns before touching anything (ATen's CPU and CUDA kernels alike).
    at::_fused_adamw_(ps, gs, m, v, {}, st, lr, cfg_.beta1, cfg_.beta2, weight_decay, cfg_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, optional(grad_divisor), optional(skip));
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) p.param.mutable_grad() = at::Tensor();
}

std::map<std::string, at::Tensor> AdamW::state_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out[params_[i].name + ".exp_avg"] = exp_avg_[i];
    out[params_[i].name + ".exp_avg_sq"] = exp_avg_sq_[i];
    out[params_[i].name + ".step"] = step_[i];
  }
  return out;
}

}  // namespace meshtrain::train
