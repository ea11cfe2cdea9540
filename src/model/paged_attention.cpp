// Paged attention: the leading decodes through the decode kernel (model/kernels/paged_decode.h) in one launch
// where it takes the tensors; the chunks after them through flash attention's variable-length kernel in one launch
// where the batch carries their index (model/paged_prefill_index.h) and flash runs, else through the reference, a
// gather then SDPA per chunk (correct for any chunk mix, one launch per chunk).
#include "meshtrain/model/paged_attention.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/attention_backend.h"
#include "meshtrain/model/kernels/paged_decode.h"
#include "meshtrain/model/kernels/paged_kv_write.h"

namespace meshtrain::model {
namespace {

// [num_blocks, block_size, H_kv, hd] as one row per slot.
at::Tensor paged_slot_rows(const at::Tensor& t) { return t.view({-1, t.size(2), t.size(3)}); }

// The slots of positions [0, context_len) of a sequence whose blocks are `row` [max_blocks] (int32 or int64).
at::Tensor paged_context_slots(const at::Tensor& row, int64_t block_size, int64_t context_len) {
  const int64_t blocks = (context_len + block_size - 1) / block_size;
  const auto ids = row.narrow(0, 0, blocks).to(at::kLong);
  const auto offsets = at::arange(block_size, ids.options());
  return (ids.unsqueeze(1) * block_size + offsets).reshape({-1}).narrow(0, 0, context_len);
}

// The reference over chunks [first, C): gather each chunk's context through its block-table row, then SDPA.
// Returns their rows, [rows of chunks first.., H, hd].
at::Tensor paged_reference_chunks(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch,
                                  size_t first) {
  MT_CHECK(first < batch.chunks.size(), "paged_attention: ", q.size(0), " rows past ", first, " decodes but ",
           batch.chunks.size(), " chunks");
  const int64_t H = q.size(1), Hkv = cache.k.size(2), bs = cache.block_size();
  const auto keys = paged_slot_rows(cache.k), values = paged_slot_rows(cache.v);
  std::vector<at::Tensor> outs;
  outs.reserve(batch.chunks.size() - first);
  for (size_t c = first; c < batch.chunks.size(); ++c) {
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

// Whether the chunks after the decodes can go through flash's variable-length kernel: their index is there, the
// device, dtype and head size are flash's, and flash is allowed (train.attention_backend's switch).
bool paged_varlen_runs(const at::Tensor& q, const PagedBatch& batch) {
  return batch.prefill_context_slots.defined() && varlen_flash_runs(q.device(), q.scalar_type(), q.size(2)) &&
         at::globalContext().userEnabledFlashSDP();
}

// Rows [first, N) of q, the chunks after the decodes, in one flash launch: each chunk's context gathered from the
// cache (written first), its queries the last num_tokens positions of it. Flash aligns the causal mask to the
// bottom right when a chunk has fewer queries than keys, which is exactly that; it takes fewer key heads (GQA).
at::Tensor paged_varlen_chunks(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch,
                               int64_t first) {
  MT_CHECK(batch.prefill_cu_queries.size(0) == static_cast<int64_t>(batch.chunks.size()) - first + 1,
           "paged_attention: a prefill index of ", batch.prefill_cu_queries.size(0) - 1, " chunks for ",
           batch.chunks.size() - static_cast<size_t>(first), " after the decodes");
  const auto k = paged_slot_rows(cache.k).index_select(0, batch.prefill_context_slots).to(q.scalar_type());
  const auto v = paged_slot_rows(cache.v).index_select(0, batch.prefill_context_slots).to(q.scalar_type());
  return std::get<0>(at::_flash_attention_forward(
      q.narrow(0, first, q.size(0) - first).contiguous(), k, v, batch.prefill_cu_queries, batch.prefill_cu_contexts,
      batch.prefill_max_queries, batch.prefill_max_context, /*dropout_p=*/0.0, /*is_causal=*/true,
      /*return_debug_mask=*/false));
}

// The chunks from `first` on (none of them decodes run by the kernel).
at::Tensor paged_prefill_chunks(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch,
                                int64_t first) {
  if (paged_varlen_runs(q, batch)) return paged_varlen_chunks(q, cache, batch, first);
  return paged_reference_chunks(q, cache, batch, static_cast<size_t>(first));
}

}  // namespace

void write_paged_kv(PagedLayerCache& cache, const at::Tensor& k, const at::Tensor& v, const PagedBatch& batch) {
  MT_CHECK(k.dim() == 3 && k.size(0) == batch.slots.size(0), "write_paged_kv: keys ", k.sizes(), " for ",
           batch.slots.size(0), " slots");
  auto k_rows = paged_slot_rows(cache.k), v_rows = paged_slot_rows(cache.v);
  if (paged_kv_write_supported(k_rows, v_rows, k, v, batch.slots)) {  // one launch for both, from the strided views
    paged_kv_write(k_rows, v_rows, k, v, batch.slots);
    return;
  }
  k_rows.index_copy_(0, batch.slots, k.to(cache.k.scalar_type()));
  v_rows.index_copy_(0, batch.slots, v.to(cache.v.scalar_type()));
}

at::Tensor rotate_and_write_paged_kv(PagedLayerCache& cache, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& cos, const at::Tensor& sin,
                                     const PagedBatch& batch) {
  auto k_rows = paged_slot_rows(cache.k), v_rows = paged_slot_rows(cache.v);
  if (!paged_rope_kv_write_supported(k_rows, v_rows, q, k, v, cos, sin, batch.slots)) return {};
  return paged_rope_kv_write(k_rows, v_rows, q, k, v, cos, sin, batch.slots);
}

at::Tensor paged_attention(const at::Tensor& q, const PagedLayerCache& cache, const PagedBatch& batch) {
  const int64_t H = q.size(1), Hkv = cache.k.size(2);
  MT_CHECK(H % Hkv == 0, "paged_attention: ", H, " query heads over ", Hkv, " key/value heads");
  const int64_t nd = batch.num_decodes;
  if (nd == 0) return paged_prefill_chunks(q, cache, batch, 0);
  if (!paged_decode_supported(q, cache.k)) return paged_reference_chunks(q, cache, batch, 0);
  MT_CHECK(nd <= q.size(0) && nd <= batch.block_tables.size(0) && batch.context_lens.defined() &&
               batch.context_lens.size(0) >= nd,
           "paged_attention: ", nd, " decodes in a batch of ", q.size(0), " rows, ", batch.block_tables.size(0),
           " block-table rows and ", batch.context_lens.defined() ? batch.context_lens.size(0) : 0,
           " context lengths");
  // Decodes are rows [0, nd), one per chunk: one launch for all of them. The kernel reads int32 block ids and
  // lengths (make_step_batch's); int64 ones are converted on the device.
  auto tables = batch.block_tables.narrow(0, 0, nd), lens = batch.context_lens.narrow(0, 0, nd);
  if (tables.scalar_type() != at::kInt) tables = tables.to(at::kInt);
  if (lens.scalar_type() != at::kInt) lens = lens.to(at::kInt);
  auto y = paged_decode_attention(q.narrow(0, 0, nd), cache.k, cache.v, tables, lens);
  // An all-decode batch (a captured graph's) reads nothing of the host-side chunk list.
  if (nd == q.size(0)) return y;
  return at::cat({y, paged_prefill_chunks(q, cache, batch, nd)}, 0);
}

}  // namespace meshtrain::model
