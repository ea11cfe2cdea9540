// AdamW on fp32 master parameters through ATen's fused kernel (at::_fused_adamw_, CPU and CUDA), with two
// groups: weights that decay and parameters that do not (norms, biases, embeddings — GPT-2/nanoGPT's rule).
// The state (exp_avg, exp_avg_sq, step) is plain tensors, named after the parameters, for checkpoints.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

class AdamW {
 public:
  struct Param {
    std::string name;
    at::Tensor param;  // fp32, requires grad
    bool decay;
  };

  AdamW(std::vector<Param> params, const OptimizerConfig& cfg);

  // One update with learning rate `lr`; parameters without a gradient are skipped.
  void step(double lr);
  void zero_grad();

  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" → tensors (shared, not copies).
  std::map<std::string, at::Tensor> state_tensors() const;
  // Copies saved state in; a missing or mis-shaped tensor is a UserError naming it.
  void load_state_tensors(const std::map<std::string, at::Tensor>& saved, const std::string& prefix);

  const std::vector<Param>& params() const { return params_; }

 private:
  std::vector<Param> params_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, step_;
  OptimizerConfig cfg_;
};

}  // namespace meshtrain::train
