// AdamW on fp32 master parameters through a fused kernel — meshtrain's on CUDA (model/kernels/fused_adamw.h,
// optimizer.fused_kernel), ATen's (at::_fused_adamw_) on the CPU or where it is off — with two
// groups: weights that decay and parameters that do not (norms, biases, embeddings — GPT-2/nanoGPT's rule).
// The state (exp_avg, exp_avg_sq, step) is plain tensors beside the parameters, named after them, for
// checkpoints. Two ways to step: step() after the layout clipped the gradients in place (scales_gradients()
// is false), or device_step() (steps_on_device()), where the clip divisor and the skip flag are device tensors
// handed to the fused kernel (its grad_scale and found_inf, as torch's GradScaler uses them), so deciding to
// clip or to skip needs no host read and no separate pass over the gradients.
#pragma once

#include "meshtrain/train/optimizer.h"

namespace meshtrain::train {

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Param> params, const OptimizerConfig& cfg);

  bool steps_on_device() const override { return true; }
  void step(double lr, double grad_scale = 1.0) override;
  void device_step(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip) override;
  void zero_grad();
  std::map<std::string, at::Tensor> state_tensors() const override;

 private:
  // Both groups through the fused kernel; `grad_divisor` and `skip` undefined: plain steps.
  void update(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip);

  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, step_;
  OptimizerConfig cfg_;
};

}  // namespace meshtrain::train
