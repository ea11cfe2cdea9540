// CUDA launcher of AdamW's update (fused_adamw.cu; used by fused_adamw.cpp). fp32 buffers.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// The update's constants as at::_fused_adamw_ takes them, each already rounded to fp32 as it rounds them, and its
// two optional device scalars: every gradient divided by *grad_divisor; nothing done where *skip is exactly 1.
struct AdamWConstants {
  float lr = 0, beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  const float* grad_divisor = nullptr;
  const float* skip = nullptr;
};

// One parameter's update in place: p, m (exp_avg) and v (exp_avg_sq) read and written, g read only, n contiguous
// elements each; *step (a device fp32 scalar, already counted for this update) gives the bias corrections.
LaunchError adamw_update(float* p, const float* g, float* m, float* v, const float* step, int64_t n,
                         const AdamWConstants& c, void* stream);

}  // namespace meshtrain::model::cuda
