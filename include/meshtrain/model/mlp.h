// Feed-forward block: GELU MLP (gpt2: fc → gelu(tanh) → proj) or SwiGLU (llama: w2(silu(w1 x) * w3 x)).
#pragma once

#include <torch/nn/module.h>

#include "meshtrain/core/config.h"
#include "meshtrain/model/linear/linear.h"

namespace meshtrain::model {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& cfg, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x);  // x: [B, T, D] → [B, T, D]
  // r + forward(x) for the residual stream r: the add inside the last projection's GEMM where it applies
  // (LinearImpl::forward_residual).
  at::Tensor forward_residual(const at::Tensor& x, const at::Tensor& r);
  // SwiGLU's gate through the fused CUDA kernel where it applies (model/kernels/fused_swiglu.h; default).
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }
  // GPT-2's fc: bias + GELU fused with the matmul where it applies (LinearImpl::forward_gelu; default).
  void set_fused_gelu(bool on) { fused_gelu_ = on; }
  bool fused_gelu() const { return fused_gelu_; }
  // GPT-2's MLP as one function with its bias, GELU and residual work in the GEMMs' epilogues
  // (model/linear/gelu_mlp.h) where both layers can_fuse() and fused_gelu() is on. The model sets it
  // (train.gemm_epilogues, on by default); a lone Mlp starts with it off.
  void set_epilogues(bool on) { epilogues_ = on; }
  bool epilogues() const { return epilogues_; }

  // SwiGLU (llama: gate, up and down) or the GELU MLP (gpt2: up and down only).
  bool swiglu() const { return swiglu_; }

  // gpt2: up = fc, down = proj; llama: gate = w1, up = w3, down = w2.
  Linear gate{nullptr}, up{nullptr}, down{nullptr};

 private:
  bool one_function() const;               // GPT-2's MLP through gelu_mlp (set_epilogues)
  at::Tensor hidden(const at::Tensor& x);  // what the last projection reads (after SwiGLU or GELU)

  bool swiglu_;
  bool fused_ = true;
  bool fused_gelu_ = true;
  bool epilogues_ = false;
};
TORCH_MODULE(Mlp);

}  // namespace meshtrain::model
