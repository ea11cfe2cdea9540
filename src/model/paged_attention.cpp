// The reference paged attention: gather, then SDPA per chunk. Correct for any chunk mix; one kernel launch per
// chunk, which a decode kernel over the block table will replace for decodes.
#include "meshtrain/model/paged_attention.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

namespace meshtrain::model {
namespace {

// [num_blocks, block_size, H_kv, hd] as one row per slot.
at::Tensor paged_slot_rows(const at::Tensor& t) { return t.view({-1, t.size(2), t.size(3)}); }

// The slots of positions [0, context_len) of a sequence whose blocks are `row` [max_blocks].
at::Tensor paged_context_slots(const at::Tensor& row, int64_t block_size, int64_t context_len) {
  const int64_t blocks = (context_len + block_size - 1) / block_size;
  const auto offsets = at::arange(block_size, row.options());
  return (row.narrow(0, 0, blocks).unsqueeze(1) * block_size + offsets).reshape({-1}).narrow(0, 0, context_len);
}

}  // namespace

void write_paged_kv(PagedLayerCache& cache, const at::Tensor& k, const at::Tensor& v, const PagedBatch& batch) {
  MT_CHECK(k.dim() == 3 && k.size(0) == batch.slots.size(0), "write_paged_kv: keys ", k.sizes(), " for ",
           batch.slots.size(0), " slots");
  paged_slot_rows(cache.k).index_copy_(0, batch.slots, k.to(cache.k.scalar_type()));
  paged_slot_rows(cache.v).index_copy_(0, batch.slots, v.to(cache.v.scalar_type()));
}

at::Tensor paged_attention(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch) {
  const int64_t H = q.size(1), Hkv = cache.k.size(2), bs = cache.block_size();
  MT_CHECK(H % Hkv == 0, "paged_attention: ", H, " query heads over ", Hkv, " key/value heads");
  const auto keys = paged_slot_rows(cache.k), values = paged_slot_rows(cache.v);
  std::vector<at::Tensor> outs;
  outs.reserve(batch.chunks.size());
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const PagedChunk& ch = batch.chunks[c];
    MT_CHECK(ch.num_tokens >= 1 && ch.num_tokens <= ch.context_len, "paged_attention: chunk ", c, " of ",
             ch.num_tokens, " tokens in a context of ", ch.context_len);
    const auto slots = paged_context_slots(batch.block_tables[static_cast<int64_t>(c)], bs, ch.context_len);
    // [1, heads, tokens, hd], SDPA's layout.
    auto k = keys.index_select(0, slots).transpose(0, 1).unsqueeze(0).to(q.scalar_type());
    auto v = values.index_select(0, slots).transpose(0, 1).unsqueeze(0).to(q.scalar_type());
    auto qc = q.narrow(0, ch.query_start, ch.num_tokens).transpose(0, 1).unsqueeze(0);
    // Query i sits at position context_len − num_tokens + i. A chunk from position 0 is SDPA's own causal case
    // (as training runs it); a decode sees every key; a chunk further on needs the causal mask shifted.
    const int64_t past = ch.context_len - ch.num_tokens;
    std::optional<at::Tensor> mask;
    if (past > 0 && ch.num_tokens > 1) {
      const auto opts = at::TensorOptions().dtype(at::kLong).device(q.device());
      mask = at::arange(ch.context_len, opts).unsqueeze(0) <=
             (at::arange(ch.num_tokens, opts) + past).unsqueeze(1);  // [tokens, context]
    }
    auto y = at::scaled_dot_product_attention(qc, k, v, mask, 0.0, /*is_causal=*/past == 0 && ch.num_tokens > 1,
                                              std::nullopt, /*enable_gqa=*/Hkv != H);
    outs.push_back(y.squeeze(0).transpose(0, 1));  // [tokens, H, hd]
  }
  return at::cat(outs, 0);
}

}  // namespace meshtrain::model
