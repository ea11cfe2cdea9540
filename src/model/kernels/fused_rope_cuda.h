// CUDA launcher of the fused rotary embedding (fused_rope.cu; used by fused_rope.cpp).
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// x, y: [B, H, T, hd] with element strides xs/ys (for B, H, T; unit stride along hd); cos/sin: fp32
// [T, hd], contiguous. Rotates each pair (i, i + hd/2) in fp32 and writes y in x's storage type:
//   forward:  y_i = x_i·cos_i − x_{i+h}·sin_i,   y_{i+h} = x_{i+h}·cos_{i+h} + x_i·sin_{i+h}
//   backward (x = ∂y, y = ∂x, the transpose of forward):
//             y_i = x_i·cos_i + x_{i+h}·sin_{i+h},   y_{i+h} = x_{i+h}·cos_{i+h} − x_i·sin_i
struct RopeShape {
  int64_t B, H, T, hd;
  int64_t xs[3], ys[3];
};
LaunchError rope(DType dt, bool backward, const void* x, void* y, const RopeShape& shape, const float* cos,
                 const float* sin, void* stream);

}  // namespace meshtrain::model::cuda
