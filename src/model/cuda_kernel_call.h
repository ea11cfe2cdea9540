// The ATen side of calling a fused kernel (cuda_kernel.h): which tensors a kernel takes, the stream to
// enqueue on, and a failed launch turned into an error. Without MESHTRAIN_CUDA_KERNELS no kernel exists and
// every fused op takes its composite ATen path.
#pragma once

#include <ATen/core/Tensor.h>

#include <initializer_list>

#include "cuda_kernel.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>
#endif

namespace meshtrain::model::cuda {

// The kernels' storage type for `t`; only meaningful where kernel_ready holds.
inline DType dtype_of(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? DType::kBF16 : DType::kF32; }

// Whether a fused kernel can take these tensors: a CUDA build, all on one CUDA device, fp32 or bf16 alike.
inline bool kernel_ready(std::initializer_list<at::Tensor> ts) {
#if MESHTRAIN_CUDA_KERNELS
  const at::Tensor& first = *ts.begin();
  if (!first.is_cuda()) return false;
  const auto dt = first.scalar_type();
  if (dt != at::kFloat && dt != at::kBFloat16) return false;
  for (const auto& t : ts)
    if (t.device() != first.device() || t.scalar_type() != dt) return false;
  return true;
#else
  (void)ts;
  return false;
#endif
}

// The current stream of t's device, as the launchers take it.
inline void* stream_of(const at::Tensor& t) {
#if MESHTRAIN_CUDA_KERNELS
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  (void)t;
  MT_CHECK(false, "stream_of: built without CUDA");
  return nullptr;
#endif
}

inline void check_launch(LaunchError err, const char* what) { MT_CHECK(err == nullptr, what, ": ", err ? err : ""); }

}  // namespace meshtrain::model::cuda
