// Feed-forward block: GELU MLP (gpt2: fc → gelu(tanh) → proj) or SwiGLU (llama: w2(silu(w1 x) * w3 x)).
#pragma once

#include <torch/nn/module.h>

#include "meshtrain/core/config.h"
#include "meshtrain/model/linear.h"

namespace meshtrain::model {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& cfg, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x);  // x: [B, T, D] → [B, T, D]

  // gpt2: up = fc, down = proj; llama: gate = w1, up = w3, down = w2.
  Linear gate{nullptr}, up{nullptr}, down{nullptr};

 private:
  bool swiglu_;
};
TORCH_MODULE(Mlp);

}  // namespace meshtrain::model
