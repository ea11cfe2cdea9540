// AdamW's update of fp32 parameters on CUDA in meshtrain's own kernel (src/model/kernels/fused_adamw.cu): the
// arithmetic of at::_fused_adamw_ (decoupled weight decay, no AMSGrad, not maximizing), in its order, one launch a
// parameter with 16-byte accesses. Unlike ATen's, where the gradients are divided by a clip divisor the divided
// values are not written back into them: nothing reads a gradient after its update (docs/model.md "Fused CUDA
// kernels").
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace meshtrain::model {

// One group's tensors, index by index: parameters, their gradients, moments and step counters (fp32 scalars on the
// parameters' device, already counted for this update, as at::_fused_adamw_ takes them).
struct AdamWTensors {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

struct AdamWSettings {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
};

// The update, in place, on the current stream; `grad_divisor` (fp32 scalar, optional) divides every gradient,
// and where `skip` (fp32 scalar, optional) is exactly 1 nothing changes. Returns false, having done nothing, where
// the kernel cannot take the tensors: not all contiguous fp32 on one CUDA device with matching sizes, or a build
// without meshtrain's CUDA kernels; the caller then runs at::_fused_adamw_.
bool fused_adamw(const AdamWTensors& t, const AdamWSettings& s, const at::Tensor& grad_divisor,
                 const at::Tensor& skip);

}  // namespace meshtrain::model
