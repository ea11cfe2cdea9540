// The prefill chunks' index for flash attention's variable-length kernel over a paged cache
// (model/paged_batch.h's prefill_* fields): each chunk after the decodes contributes its query rows and the cache
// slots of its whole context [0, context_len), so that one kernel launch per layer attends every chunk, causally
// with each chunk's queries at the end of its context. Built on the host from the chunks and their block-table
// rows, where the caller (the engine's step batch, a test) has them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

#include "meshtrain/model/paged_batch.h"

namespace meshtrain::model {

struct PagedPrefillIndex {
  std::vector<int64_t> context_slots;                 // the fields of PagedBatch's prefill_*, on the host
  std::vector<int32_t> cu_queries{0}, cu_contexts{0};
  int64_t max_queries = 0, max_context = 0;
};

// Chunks [first, chunks.size()): chunk c's blocks are tables[c · row_width, …) (int32, padded after).
PagedPrefillIndex paged_prefill_index(std::span<const PagedChunk> chunks, size_t first,
                                      std::span<const int32_t> tables, int64_t row_width, int64_t block_size);

// Copies `index` into `batch`'s prefill_* fields on `device` (one copy per tensor: for tests and simple callers;
// the engine packs them into its one upload per step).
void set_paged_prefill_index(PagedBatch& batch, const PagedPrefillIndex& index, const at::Device& device);

}  // namespace meshtrain::model
