// Decode attention over a paged KV cache on CUDA (docs/serving.md "Decode-attention kernel"): one query per
// sequence, at its last position, attends over the sequence's keys and values read in place from the cache
// through its block-table row. The reference (model/paged_attention.cpp) gathers each sequence's context into a
// new tensor and runs SDPA per sequence; this reads every key and value once, for all the query heads of a GQA
// group together, in one launch for the whole batch (plus a small one that combines the context's splits).
//
// Made to be captured in a CUDA graph: no host synchronisation, every buffer from PyTorch's caching allocator,
// and a work split that depends only on the tensors' shapes, never on their values (context lengths and block
// ids are read on the device).
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// q [B, H, hd] (one query per sequence, at its last position) → [B, H, hd], q's dtype: row b attends over
// positions [0, context_lens[b]) of its sequence, read from k_cache/v_cache [num_blocks, block_size, H_kv, hd]
// through block_tables[b] ([B, max_blocks] int32). H a multiple of H_kv (GQA). Softmax scale 1/sqrt(hd).
// CUDA only, bf16/fp16/fp32 (cache dtype = q dtype), hd in {64, 128}, any block size. No host synchronisation
// and no allocation outside PyTorch's caching allocator, so that a CUDA graph can capture it; the work split
// depends only on the tensors' shapes (B, max_blocks), never on their values.
// A row whose context_lens is 0 (a padding row of a captured batch) gets zeros; a length past the row's
// max_blocks · block_size is read as that many positions.
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens);

// Whether paged_decode_attention takes these (device, dtypes, head_dim); false in a build without CUDA.
bool paged_decode_supported(const at::Tensor& q, const at::Tensor& k_cache);

}  // namespace meshtrain::model
