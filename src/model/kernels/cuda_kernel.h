// The boundary between the model room's ATen code (fused_*.cpp) and its CUDA kernels (fused_*.cu): plain
// types only, so the .cu files see no Torch header (nvcc stays quick) and the .cpp files no CUDA header.
// Every launcher enqueues on the given stream (a cudaStream_t) and returns nullptr when the launch went
// through, else CUDA's error string.
#pragma once

#include <cstdint>

namespace meshtrain::model::cuda {

// Storage types. kF16 only where a launcher says it takes it (column_sum_cuda.h); the others return an error.
enum class DType { kF32, kBF16, kF16 };
using LaunchError = const char*;

}  // namespace meshtrain::model::cuda
