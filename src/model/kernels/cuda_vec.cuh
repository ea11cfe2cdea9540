// Device helpers shared by the fused kernels: fp32 conversion of the storage types and aligned vectors
// (16-byte loads and stores, the widest a thread issues in one instruction).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "meshtrain/core/cuda_check.h"
#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// N elements of T loaded or stored as one access; requires N·sizeof(T)-byte alignment.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements of T per 16-byte access.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// What a launcher returns after enqueuing its kernels: nullptr, or the launch's CUDA error (a bad grid, no
// kernel image for this GPU).
inline LaunchError launch_status() { return cuda_error(cudaGetLastError()); }

inline bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls `f(DTypeTag)` with the storage type for `dt` (float or __nv_bfloat16); kF16 is refused.
template <typename F>
LaunchError dispatch(DType dt, F&& f) {
  if (dt == DType::kF16) return "fp16 storage is not supported by this kernel";
  if (dt == DType::kBF16) return f(__nv_bfloat16{});
  return f(float{});
}

// dispatch for the kernels that also take fp16 (__half).
template <typename F>
LaunchError dispatch_with_half(DType dt, F&& f) {
  if (dt == DType::kF16) return f(__half{});
  return dispatch(dt, f);
}

}  // namespace meshtrain::model::cuda
