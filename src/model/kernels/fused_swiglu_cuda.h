// CUDA launchers of the fused SwiGLU (fused_swiglu.cu; used by fused_swiglu.cpp). All buffers hold n
// contiguous elements of one storage type; math in fp32.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// y = silu(gate) · up.
LaunchError swiglu_forward(DType dt, const void* gate, const void* up, void* y, int64_t n, void* stream);

// From ∂y, gate and up in one pass: ∂up = ∂y · silu(gate), ∂gate = ∂y · up · σ(gate)·(1 + gate·(1 − σ(gate))).
LaunchError swiglu_backward(DType dt, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                            int64_t n, void* stream);

}  // namespace meshtrain::model::cuda
