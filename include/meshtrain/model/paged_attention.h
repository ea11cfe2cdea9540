// Attention over a paged KV cache (docs/serving.md "Engine"), the reference made of ATen ops: each chunk's
// context is gathered from the cache through its block-table row and attended with SDPA under a causal mask
// offset by the chunk's start. A decode kernel over the block table can replace paged_attention() behind this
// same signature.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/model/paged_batch.h"

namespace meshtrain::model {

// Writes the step's keys and values k, v [N, H_kv, hd] into `cache` at `batch.slots`.
void write_paged_kv(PagedLayerCache& cache, const at::Tensor& k, const at::Tensor& v, const PagedBatch& batch);

// RoPE and the write in one launch where the CUDA kernel takes them (model/kernels/paged_kv_write.h): q, k
// [N, H or H_kv, hd] before RoPE, v [N, H_kv, hd], cos and sin fp32 [N, hd] (token n's rows) → q rotated
// [N, H, hd], with k rotated and v written into `cache` as write_paged_kv writes them; else undefined, nothing
// done (the caller rotates and writes).
at::Tensor rotate_and_write_paged_kv(PagedLayerCache& cache, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& cos, const at::Tensor& sin,
                                     const PagedBatch& batch);

// q [N, H, hd] (H a multiple of the cache's H_kv: grouped-query attention) → [N, H, hd]: row i of chunk c
// attends over its sequence's positions [0, context_len − num_tokens + i], read from `cache` (written first).
at::Tensor paged_attention(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch);

}  // namespace meshtrain::model
