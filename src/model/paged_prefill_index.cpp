#include "meshtrain/model/paged_prefill_index.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

PagedPrefillIndex paged_prefill_index(std::span<const PagedChunk> chunks, size_t first,
                                      std::span<const int32_t> tables, int64_t row_width, int64_t block_size) {
  PagedPrefillIndex out;
  for (size_t c = first; c < chunks.size(); ++c) {
    const PagedChunk& ch = chunks[c];
    const size_t row = c * static_cast<size_t>(row_width);
    MT_CHECK((ch.context_len + block_size - 1) / block_size <= row_width && row + row_width <= tables.size(),
             "paged_prefill_index: chunk ", c, "'s context of ", ch.context_len, " tokens needs more than its ",
             row_width, " blocks");
    for (int64_t p = 0; p < ch.context_len; ++p)
      out.context_slots.push_back(static_cast<int64_t>(tables[row + static_cast<size_t>(p / block_size)]) *
                                      block_size + p % block_size);
    out.cu_queries.push_back(out.cu_queries.back() + static_cast<int32_t>(ch.num_tokens));
    out.cu_contexts.push_back(out.cu_contexts.back() + static_cast<int32_t>(ch.context_len));
    out.max_queries = std::max(out.max_queries, ch.num_tokens);
    out.max_context = std::max(out.max_context, ch.context_len);
  }
  return out;
}

void set_paged_prefill_index(PagedBatch& batch, const PagedPrefillIndex& index, const at::Device& device) {
  batch.prefill_context_slots = at::tensor(index.context_slots, at::kLong).to(device);
  batch.prefill_cu_queries = at::tensor(index.cu_queries, at::kInt).to(device);
  batch.prefill_cu_contexts = at::tensor(index.cu_contexts, at::kInt).to(device);
  batch.prefill_max_queries = index.max_queries;
  batch.prefill_max_context = index.max_context;
}

}  // namespace meshtrain::model
