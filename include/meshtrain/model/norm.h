// Norm: LayerNorm (GPT-2, with bias) or RMSNorm (Llama, weight only) over the last dim.
#pragma once

#include "meshtrain/model/param_module.h"

namespace meshtrain::model {

class NormImpl : public ParamModule {
 public:
  NormImpl(bool rms, int64_t dim, double eps, const at::TensorOptions& opts);
  // x: [..., dim] → [..., dim]
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight, bias;  // bias undefined for RMSNorm

 private:
  bool rms_;
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(Norm);

}  // namespace meshtrain::model
