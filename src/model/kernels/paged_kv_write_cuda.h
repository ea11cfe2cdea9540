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

}  // namespace meshtrain::model::cuda
