// PagedBatch: one inference step's tokens for the model's paged path (model/paged_forward.h), ragged rather than
// padded: the step's chunks laid end to end, each a run of one sequence's consecutive positions whose keys and
// values go into a paged KV cache (PagedLayerCache) and whose queries attend over that sequence's context.
// Plain tensors and numbers only, so that the serving engine fills it without `model` knowing the engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace meshtrain::model {

// One layer's cache: keys and values [num_blocks, block_size, H_kv, head_dim]; row `slot` of the flattened
// [num_blocks · block_size, H_kv, head_dim] view holds one token's keys (slot = block · block_size + offset).
struct PagedLayerCache {
  at::Tensor k, v;
  int64_t block_size() const { return k.size(1); }
};

// One chunk of the batch: rows [query_start, query_start + num_tokens) of the tokens, the positions
// [context_len − num_tokens, context_len) of its sequence. It attends over positions [0, context_len).
struct PagedChunk {
  int64_t query_start = 0;
  int64_t num_tokens = 0;
  int64_t context_len = 0;
};

struct PagedBatch {
  at::Tensor tokens;        // [N] int64, on the model's device
  at::Tensor positions;     // [N] int64: RoPE and learned positions index by position, not by row
  at::Tensor slots;         // [N] int64: the cache row each token's keys and values are written to
  at::Tensor block_tables;  // [C, max_blocks] int32 (int64 also taken): chunk c's sequence's blocks, in order
                            // (padding after)
  at::Tensor sample_rows;   // [S] int64: the rows whose logits are wanted (a chunk's last token that samples)
  at::Tensor context_lens;  // [C] int32: chunk c's context_len, on the device (the decode kernel reads it)
  // Chunks [0, num_decodes) are single-token decodes, which are rows [0, num_decodes): on CUDA they go through
  // the decode kernel in one launch (model/kernels/paged_decode.h) and the rest through the reference. When
  // every row is a decode, attention reads only the tensors, never `chunks`.
  int64_t num_decodes = 0;
  std::vector<PagedChunk> chunks;  // [C], on the host: the reference attention loops over them
  // Optional, for the chunks after the decodes (P of them): on CUDA in bf16/fp16, flash attention's
  // variable-length kernel attends all of them in one launch per layer, reading each one's context through these
  // (model/paged_prefill_index.h makes them). Where they are undefined, or flash cannot run, each chunk goes
  // through the reference.
  at::Tensor prefill_context_slots;  // [Σ context_len] int64: each prefill chunk's context slots, end to end
  at::Tensor prefill_cu_queries;     // [P + 1] int32: each chunk's first row counted from row num_decodes, then the total
  at::Tensor prefill_cu_contexts;    // [P + 1] int32: each chunk's first entry in prefill_context_slots, then the total
  int64_t prefill_max_queries = 0;   // the longest prefill chunk
  int64_t prefill_max_context = 0;   // the longest prefill chunk's context
};

}  // namespace meshtrain::model
