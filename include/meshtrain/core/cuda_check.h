// The one check of a CUDA runtime call's return code, for every CUDA source of meshtrain: the NCCL backend
// (src/comm/nccl/) throws through CUDA_CHECK; the fused kernels' launchers (src/model/kernels/*.cu), which hand
// an error string back across their boundary instead of throwing (model/kernels/cuda_kernel.h), take it from
// cuda_error. Header-only, with no Torch header: included only where the CUDA toolkit is (MESHTRAIN_WITH_CUDA,
// the meshtrain_model_cuda target).
#pragma once

#include <cuda_runtime_api.h>

#include "meshtrain/core/error.h"

namespace meshtrain {

// CUDA's text for a failed call ("out of memory"), nullptr for cudaSuccess.
inline const char* cuda_error(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }

}  // namespace meshtrain

// Throws Error naming the call, where it was made and CUDA's text for the failure.
#define CUDA_CHECK(expr)                                                                                    \
  do {                                                                                                      \
    const cudaError_t mt_e_ = (expr);                                                                       \
    if (mt_e_ != cudaSuccess) {                                                                             \
      throw ::meshtrain::Error(::meshtrain::cat(__FILE__, ":", __LINE__, ": " #expr ": ",                   \
                                                ::meshtrain::cuda_error(mt_e_)));                           \
    }                                                                                                       \
  } while (0)
