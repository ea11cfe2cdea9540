// The paged cache's write: each step's new keys and values, strided views of the projection's output, copied
// into their cache slots in one launch for both. The composite path (index_copy_ of each) first makes each
// view contiguous, so it spends four launches a layer where this spends one, which shows at batch 1, where a
// decode step is many small launches. For Llama the same launch can also apply the rotary embedding: keys are
// rotated on their way into the cache and queries into their own output (paged_rope_kv_write), where RoPE
// would take a launch of its own and write the rotated keys once more before this copy reads them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/paged_kv_write_cuda.h"
#include "model/kernels/rope_pair.cuh"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;

// The cache row of token n, or nullptr when its slot lies outside the cache (a padded row writes nothing).
template <typename T>
__device__ __forceinline__ T* cache_row(const PagedKvWriteShape& s, const int64_t* __restrict__ slots, int64_t n,
                                        int64_t h, T* __restrict__ cache) {
  const int64_t slot = slots[n];
  if (slot < 0 || slot >= s.rows) return nullptr;
  return cache + slot * s.cache_stride[0] + h * s.cache_stride[1];
}

// Thread i of a copy grid copies piece i % pieces (16 bytes) of head (i / pieces) % H_kv of token
// i / (pieces · H_kv) from src (strides src_stride) into its cache slot.
template <typename T>
__device__ __forceinline__ void copy_piece_into_cache(const PagedKvWriteShape& s, int64_t i,
                                                      const T* __restrict__ src, const int64_t* src_stride,
                                                      const int64_t* __restrict__ slots, T* __restrict__ cache) {
  constexpr int kVec = kVec16<T>;
  const int64_t pieces = s.hd / kVec;
  if (i >= s.N * s.Hkv * pieces) return;
  const int64_t n = i / (s.Hkv * pieces), h = (i / pieces) % s.Hkv, c = (i % pieces) * kVec;
  T* dst = cache_row(s, slots, n, h, cache);
  if (dst == nullptr) return;
  *reinterpret_cast<Vec<T, kVec>*>(dst + c) =
      *reinterpret_cast<const Vec<T, kVec>*>(src + n * src_stride[0] + h * src_stride[1] + c);
}

// y = 0 keys, 1 values; each thread copies one piece (copy_piece_into_cache).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    paged_kv_write_kernel(PagedKvWriteShape s, const T* __restrict__ k, const T* __restrict__ v,
                          const int64_t* __restrict__ slots, T* __restrict__ kc, T* __restrict__ vc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (blockIdx.y == 1)
    copy_piece_into_cache(s, i, v, s.v_stride, slots, vc);
  else
    copy_piece_into_cache(s, i, k, s.k_stride, slots, kc);
}

// The write with RoPE. y = 0: keys, thread i rotating pair-piece i % (pieces/2) of head (i / (pieces/2)) % H_kv
// of its token into the cache; y = 1: values, copied as paged_kv_write copies them; y = 2: queries, rotated into
// q_out. Rows whose slot lies outside the cache write no key or value; their queries are still rotated.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    paged_rope_kv_write_kernel(PagedKvWriteShape s, PagedRopeQ qs, const T* __restrict__ q,
                               const T* __restrict__ k, const T* __restrict__ v, const float* __restrict__ cos,
                               const float* __restrict__ sin, const int64_t* __restrict__ slots,
                               T* __restrict__ q_out, T* __restrict__ kc, T* __restrict__ vc) {
  constexpr int kVec = kVec16<T>;
  const int64_t pieces = s.hd / kVec, half = s.hd / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (blockIdx.y == 1) {
    copy_piece_into_cache(s, i, v, s.v_stride, slots, vc);
    return;
  }
  const bool queries = blockIdx.y == 2;
  const int64_t heads = queries ? qs.H : s.Hkv, pairs = pieces / 2;
  if (i >= s.N * heads * pairs) return;
  const int64_t n = i / (heads * pairs), h = (i / pairs) % heads, c = (i % pairs) * kVec;
  const T* src;
  T* dst;
  if (queries) {
    src = q + n * qs.q_stride[0] + h * qs.q_stride[1];
    dst = q_out + (n * qs.H + h) * s.hd;
  } else {
    src = k + n * s.k_stride[0] + h * s.k_stride[1];
    dst = cache_row(s, slots, n, h, kc);
    if (dst == nullptr) return;
  }
  Vec<T, kVec> y1, y2;
  rope_rotate<T, kVec>(false, *reinterpret_cast<const Vec<T, kVec>*>(src + c),
                       *reinterpret_cast<const Vec<T, kVec>*>(src + c + half),
                       rope_tables_at<kVec>(cos + n * s.hd, sin + n * s.hd, c, half), y1, y2);
  *reinterpret_cast<Vec<T, kVec>*>(dst + c) = y1;
  *reinterpret_cast<Vec<T, kVec>*>(dst + c + half) = y2;
}

// Why the launchers cannot take these (nullptr when they can): unit-stride rows of whole 16-byte pieces.
template <typename T>
LaunchError write_shape_error(const PagedKvWriteShape& s, const void* k, const void* v, const void* k_cache,
                              const void* v_cache) {
  constexpr int64_t n = kVec16<T>;
  const bool strides_ok = s.hd % n == 0 && s.k_stride[0] % n == 0 && s.k_stride[1] % n == 0 &&
                          s.v_stride[0] % n == 0 && s.v_stride[1] % n == 0 && s.cache_stride[0] % n == 0 &&
                          s.cache_stride[1] % n == 0;
  if (!strides_ok || !aligned(k, 16) || !aligned(v, 16) || !aligned(k_cache, 16) || !aligned(v_cache, 16))
    return "paged kv write: rows must be 16-byte aligned";
  return nullptr;
}

}  // namespace

LaunchError paged_kv_write(DType dt, const PagedKvWriteShape& s, const void* k, const void* v, const int64_t* slots,
                           void* k_cache, void* v_cache, void* stream) {
  return dispatch_with_half(dt, [&](auto tag) -> LaunchError {
    using T = decltype(tag);
    constexpr int64_t n = kVec16<T>;
    if (const LaunchError e = write_shape_error<T>(s, k, v, k_cache, v_cache)) return e;
    const int64_t threads = s.N * s.Hkv * (s.hd / n);
    if (threads == 0) return nullptr;
    const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads), 2);
    paged_kv_write_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        s, static_cast<const T*>(k), static_cast<const T*>(v), slots, static_cast<T*>(k_cache),
        static_cast<T*>(v_cache));
    return launch_status();
  });
}

LaunchError paged_rope_kv_write(DType dt, const PagedKvWriteShape& s, const PagedRopeQ& qs, const void* q,
                                const void* k, const void* v, const float* cos, const float* sin,
                                const int64_t* slots, void* q_out, void* k_cache, void* v_cache, void* stream) {
  return dispatch_with_half(dt, [&](auto tag) -> LaunchError {
    using T = decltype(tag);
    constexpr int64_t n = kVec16<T>;
    if (const LaunchError e = write_shape_error<T>(s, k, v, k_cache, v_cache)) return e;
    if ((s.hd / 2) % n != 0 || qs.q_stride[0] % n != 0 || qs.q_stride[1] % n != 0 || !aligned(q, 16) ||
        !aligned(q_out, 16) || !aligned(cos, 16 * sizeof(float) / sizeof(T)) ||
        !aligned(sin, 16 * sizeof(float) / sizeof(T)))
      return "paged RoPE write: half a head row must be whole 16-byte pieces, rows and tables aligned";
    const int64_t pieces = s.hd / n;
    const int64_t threads = std::max(s.N * s.Hkv * pieces, s.N * std::max(qs.H, s.Hkv) * (pieces / 2));
    if (threads == 0) return nullptr;
    const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads), 3);
    paged_rope_kv_write_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        s, qs, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), cos, sin, slots,
        static_cast<T*>(q_out), static_cast<T*>(k_cache), static_cast<T*>(v_cache));
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
