// CUDA launchers of the fused SwiGLU (fused_swiglu.cu; used by fused_swiglu.cpp). Buffers of one storage type;
// math in fp32.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// y = silu(gate) · up over `rows` rows of `width` elements: y contiguous [rows, width]; gate and up rows
// `in_row_stride` elements apart, each row contiguous (width for contiguous inputs; 2 · width for the two halves of
// one [rows, 2 · width] GEMM output, the inference path's fused gate and up).
LaunchError swiglu_forward(DType dt, const void* gate, const void* up, void* y, int64_t rows, int64_t width,
                           int64_t in_row_stride, void* stream);

// All buffers n contiguous elements. From ∂y, gate and up in one pass: ∂up = ∂y · silu(gate), ∂gate = ∂y · up · σ(gate)·(1 + gate·(1 − σ(gate))).
LaunchError swiglu_backward(DType dt, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                            int64_t n, void* stream);

}  // namespace meshtrain::model::cuda
