// The ATen side of calling a fused kernel (cuda_kernel.h): which tensors a kernel takes, the stream to
// enqueue on, and a failed launch turned into an error. Without MESHTRAIN_CUDA_KERNELS no kernel exists and
// every fused op takes its composite ATen path.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>

#include "model/kernels/cuda_kernel.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace meshtrain::model::cuda {

// The kernels' storage type for `t` (fp32, bf16 or fp16); only meaningful where kernel_ready holds or the
// launcher takes fp16.
inline DType dtype_of(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return DType::kBF16;
  return t.scalar_type() == at::kHalf ? DType::kF16 : DType::kF32;
}

// Whether `t`'s rows allow 16-byte loads: unit stride along the last dimension, every other stride and the
// start 16-byte aligned (the paged kernels' vector loads).
inline bool rows_allow_16_byte_loads(const at::Tensor& t) {
  const int64_t n = 16 / static_cast<int64_t>(t.element_size());
  if (t.stride(t.dim() - 1) != 1 || reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.stride(d) % n != 0) return false;
  return true;
}

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

#if MESHTRAIN_CUDA_KERNELS
// `t` at the dtype a matmul runs in: autocast's (cached for weights, as at::linear's casts are) where it is on
// for CUDA, else as given. A fused op that stands in for at::linear casts its inputs with this first.
inline at::Tensor compute_cast(const at::Tensor& t) {
  if (!at::autocast::is_autocast_enabled(at::kCUDA)) return t;
  return at::autocast::cached_cast(at::autocast::get_autocast_dtype(at::kCUDA), t, c10::DeviceType::CUDA);
}
#endif

inline void check_launch(LaunchError err, const char* what) { MT_CHECK(err == nullptr, what, ": ", err ? err : ""); }

}  // namespace meshtrain::model::cuda
