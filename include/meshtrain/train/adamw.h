// AdamW on fp32 master parameters through ATen's fused kernel (at::_fused_adamw_, CPU and CUDA), with two
// groups: weights that decay and parameters that do not (norms, biases, embeddings — GPT-2/nanoGPT's rule).
// The state (exp_avg, exp_avg_sq, step) is plain tensors beside the parameters, named after them, for
// checkpoints. The layout clips the gradients (scales_gradients() is false).
#pragma once

#include "meshtrain/train/optimizer.h"

namespace meshtrain::train {

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Param> params, const OptimizerConfig& cfg);

  void step(double lr, double grad_scale = 1.0) override;
  void zero_grad();
  std::map<std::string, at::Tensor> state_tensors() const override;

 private:
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, step_;
  OptimizerConfig cfg_;
};

}  // namespace meshtrain::train
