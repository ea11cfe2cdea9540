// Norm: LayerNorm (GPT-2, with bias) or RMSNorm (Llama, weight only) over the last dim.
#pragma once

#include <utility>

#include "meshtrain/model/param_module.h"
#include "meshtrain/model/table_rows.h"

namespace meshtrain::model {

class NormImpl : public ParamModule {
 public:
  NormImpl(bool rms, int64_t dim, double eps, const at::TensorOptions& opts);
  // x: [..., dim] → [..., dim]; through the fused CUDA kernel where it applies and fused() holds
  // (model/kernels/fused_add_norm.h: the output in the autocast dtype under autocast), else ATen's norm.
  at::Tensor forward(const at::Tensor& x);
  // x → {x, forward(x)} for an x used unnormalised too: with the fused kernel, the gradient of the first is
  // added to the norm's input gradient inside the norm's backward kernel (fused_norm_pass). `rows`: x is those
  // rows of an embedding table, which the fused kernel's backward gathers again instead of keeping x.
  std::pair<at::Tensor, at::Tensor> pass_forward(const at::Tensor& x, const TableRows* rows = nullptr);
  // The residual add before the norm: x, r: [..., dim] → {h = x + r, forward(h)}; one fused CUDA kernel
  // where it applies and fused() holds, else the add and forward.
  std::pair<at::Tensor, at::Tensor> add_forward(const at::Tensor& x, const at::Tensor& r);

  // The fused kernels in forward and add_forward (default on).
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }

  at::Tensor weight, bias;  // bias undefined for RMSNorm

 private:
  bool rms_;
  int64_t dim_;
  double eps_;
  bool fused_ = true;
};
TORCH_MODULE(Norm);

}  // namespace meshtrain::model
