// CUDA launchers of the fused softmax cross-entropy (fused_cross_entropy.cu; used by fused_cross_entropy.cpp).
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// One block per row of `logits` [rows, V] (row stride `stride` elements, unit column stride): reads the row
// once and writes its log-sum-exp to lse[r] and its loss lse − logits[r, t] to loss[r] (fp32), where
// t = targets[r]; 0 for t == ignore_index, NaN for a target outside [0, V).
LaunchError cross_entropy_forward(DType dt, const void* logits, int64_t rows, int64_t V, int64_t stride,
                                  const int64_t* targets, int64_t ignore_index, float* loss, float* lse,
                                  void* stream);

// dlogits[r, j] = (exp(logits[r, j] − lse[r]) − [j == t]) · (*grad_loss / *n_valid), 0 on ignored rows.
// `dlogits` may be `logits` itself (each element is read before it is written, by the same thread).
LaunchError cross_entropy_backward(DType dt, const void* logits, int64_t in_stride, void* dlogits,
                                   int64_t out_stride, int64_t rows, int64_t V, const int64_t* targets,
                                   int64_t ignore_index, const float* lse, const float* grad_loss,
                                   const float* n_valid, void* stream);

}  // namespace meshtrain::model::cuda
