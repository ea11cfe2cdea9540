// The paged cache's write: each step's new keys and values, strided views of the projection's output, copied
// into their cache slots in one launch for both. The composite path (index_copy_ of each) first makes each
// view contiguous, so it spends four launches a layer where this spends one, which shows at batch 1, where a
// decode step is many small launches.
#include <cuda_runtime.h>

#include <cstdint>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/paged_kv_write_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;

// Thread i copies 16 bytes: piece i % pieces of head (i / pieces) % H_kv of token i / (pieces · H_kv); y = 0
// keys, 1 values.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    paged_kv_write_kernel(PagedKvWriteShape s, const T* __restrict__ k, const T* __restrict__ v,
                          const int64_t* __restrict__ slots, T* __restrict__ kc, T* __restrict__ vc) {
  constexpr int kVec = kVec16<T>;
  const int64_t pieces = s.hd / kVec;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= s.N * s.Hkv * pieces) return;
  const int64_t n = i / (s.Hkv * pieces), h = (i / pieces) % s.Hkv, c = i % pieces;
  const int64_t slot = slots[n];
  if (slot < 0 || slot >= s.rows) return;
  const bool values = blockIdx.y == 1;
  const T* src = values ? v + n * s.v_stride[0] + h * s.v_stride[1] : k + n * s.k_stride[0] + h * s.k_stride[1];
  T* dst = (values ? vc : kc) + slot * s.cache_stride[0] + h * s.cache_stride[1];
  *reinterpret_cast<Vec<T, kVec>*>(dst + c * kVec) = *reinterpret_cast<const Vec<T, kVec>*>(src + c * kVec);
}

}  // namespace

LaunchError paged_kv_write(DType dt, const PagedKvWriteShape& s, const void* k, const void* v, const int64_t* slots,
                           void* k_cache, void* v_cache, void* stream) {
  return dispatch_with_half(dt, [&](auto tag) -> LaunchError {
    using T = decltype(tag);
    constexpr int64_t n = kVec16<T>;
    const bool strides_ok = s.hd % n == 0 && s.k_stride[0] % n == 0 && s.k_stride[1] % n == 0 &&
                            s.v_stride[0] % n == 0 && s.v_stride[1] % n == 0 && s.cache_stride[0] % n == 0 &&
                            s.cache_stride[1] % n == 0;
    if (!strides_ok || !aligned(k, 16) || !aligned(v, 16) || !aligned(k_cache, 16) || !aligned(v_cache, 16))
      return "paged kv write: rows must be 16-byte aligned";
    const int64_t threads = s.N * s.Hkv * (s.hd / n);
    if (threads == 0) return nullptr;
    const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads), 2);
    paged_kv_write_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        s, static_cast<const T*>(k), static_cast<const T*>(v), slots, static_cast<T*>(k_cache),
        static_cast<T*>(v_cache));
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
