// CUDA launcher of the paged cache's write (paged_kv_write.cu; used by paged_kv_write.cpp).
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// Element strides in elements of the storage type; every tensor has unit stride along the head dim.
struct PagedKvWriteShape {
  int64_t N = 0, Hkv = 0, hd = 0;     // k and v [N, H_kv, hd]
  int64_t rows = 0;                   // the cache's slot rows [rows, H_kv, hd]
  int64_t k_stride[2] = {0, 0};       // k: between tokens, between heads
  int64_t v_stride[2] = {0, 0};       // v: between tokens, between heads
  int64_t cache_stride[2] = {0, 0};   // both caches alike: between slot rows, between heads
};

// k_cache[slots[n]] = k[n] and v_cache[slots[n]] = v[n] for n < N, one launch; a slot outside [0, rows) is
// not written. All pointers on one device, 16-byte aligned rows (hd · element size a multiple of 16).
LaunchError paged_kv_write(DType dt, const PagedKvWriteShape& shape, const void* k, const void* v,
                           const int64_t* slots, void* k_cache, void* v_cache, void* stream);

// The same write with the rotary embedding in the same launch: the keys rotated on their way into the cache,
// and the queries q [N, H, hd] (strides q_stride) rotated into q_out, contiguous [N, H, hd]. cos/sin: fp32
// [N, hd] contiguous, row n token n's (fused_rope_cuda.h's formula, forward). hd/2 a whole number of
// 16-byte pieces; q's rows 16-byte aligned.
struct PagedRopeQ {
  int64_t H = 0;
  int64_t q_stride[2] = {0, 0};  // between tokens, between heads
};
LaunchError paged_rope_kv_write(DType dt, const PagedKvWriteShape& shape, const PagedRopeQ& qs, const void* q,
                                const void* k, const void* v, const float* cos, const float* sin,
                                const int64_t* slots, void* q_out, void* k_cache, void* v_cache, void* stream);

}  // namespace meshtrain::model::cuda
