// CUDA launcher of the tanh-GELU backward fused with the bias gradient (fused_gelu.cu; used by
// fused_linear_gelu.cpp). Buffers [rows, cols] contiguous, one storage type; math in fp32.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// Row chunks of the bias gradient's first stage; the caller sums the [chunks, cols] partials over chunks.
int64_t gelu_bias_chunks(int64_t rows);

// ∂pre = ∂y · gelu_tanh'(pre), and dbias_part[c][j] = Σ over chunk c's rows of ∂pre[·][j] (fp32, unrounded).
LaunchError gelu_bias_backward(DType dt, const void* dy, const void* pre, void* dpre, float* dbias_part,
                               int64_t rows, int64_t cols, void* stream);

}  // namespace meshtrain::model::cuda
