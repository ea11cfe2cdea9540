// CUDA launcher of the paged decode attention (paged_decode.cu; used by paged_decode.cpp).
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// Element strides are in elements of the storage type; every tensor has unit stride along the head dim.
struct PagedDecodeShape {
  int64_t B = 0, H = 0, Hkv = 0, hd = 0;   // q [B, H, hd]; the cache's heads H_kv divide H
  int64_t block_size = 0, max_blocks = 0;  // cache [num_blocks, block_size, H_kv, hd]; tables [B, max_blocks]
  int64_t q_stride[2] = {0, 0};            // q: between rows, between heads
  int64_t cache_stride[3] = {0, 0, 0};     // k and v alike: between blocks, slots, heads
  int64_t table_stride = 0;                // block_tables: between rows
  // Set by plan_paged_decode: the most runs a row's context is cut into (each row cuts its own, by its length).
  int64_t splits = 1;
};

// Fills shape.splits from the shape alone (B, H, H_kv, max_blocks · block_size) and the GPU's SM count: enough
// (row, head group, run) CTAs to fill the GPU. Each row then cuts its own context into at most that many runs.
void plan_paged_decode(PagedDecodeShape& shape, int num_sms);

// The fp32 scratch the launcher needs for a planned shape: the splits' partial results, 0 for one split.
int64_t paged_decode_scratch_floats(const PagedDecodeShape& shape);

// out [B, H, hd] (contiguous, q's type) = softmax(q·kᵀ/√hd)·v over positions [0, context_lens[b]) of row b,
// its keys and values at cache[tables[b][p / block_size]][p % block_size]. q, k, v, out in storage type dt;
// tables and context_lens int32 on the device; scratch: paged_decode_scratch_floats(shape) floats.
LaunchError paged_decode(DType dt, const PagedDecodeShape& shape, const void* q, const void* k_cache,
                         const void* v_cache, const int32_t* block_tables, const int32_t* context_lens,
                         float* scratch, void* out, void* stream);

}  // namespace meshtrain::model::cuda
