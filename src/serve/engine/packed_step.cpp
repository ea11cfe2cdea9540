#include "meshtrain/serve/engine/packed_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "meshtrain/core/error.h"
#include "meshtrain/model/paged_prefill_index.h"

namespace meshtrain::serve {
namespace {

constexpr int64_t kPackedCounts = 6;  // N, C, S, num_decodes, B, block size

int32_t packed_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), "pack_step: ", what, " ", v, " does not fit int32");
  return static_cast<int32_t>(v);
}

// `n` ints of `data` from `from` on, as a [n] tensor of `dtype` on `device`.
at::Tensor packed_run(std::span<const int32_t> data, int64_t from, int64_t n, at::ScalarType dtype,
                      const at::Device& device) {
  auto host = at::from_blob(const_cast<int32_t*>(data.data() + from), {n}, at::kInt);
  return host.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

int64_t packed_step_size(int64_t tokens, int64_t chunks, int64_t sample_rows, int64_t max_blocks) {
  return kPackedCounts + 3 * tokens + 3 * chunks + chunks * max_blocks + sample_rows;
}

PackedStep pack_step(const StepPlan& plan, const Scheduler& scheduler) {
  PackedStep out;
  std::vector<int32_t> tokens, positions, slots, query_start, num_tokens, context_len, sample_rows;
  std::vector<const Sequence*> chunk_seqs;
  size_t max_blocks = 1;
  for (const auto* chunks : {&plan.decodes, &plan.prefills}) {  // decodes first, as make_step_batch
    for (const Chunk& c : *chunks) {
      const Sequence& s = scheduler.sequence(c.id);
      query_start.push_back(packed_int(static_cast<int64_t>(tokens.size()), "row"));
      for (int32_t p = c.start; p < c.start + c.num_tokens; ++p) {
        tokens.push_back(packed_int(s.tokens[static_cast<size_t>(p)], "token id"));
        positions.push_back(p);
        slots.push_back(packed_int(s.table.slot(p), "slot"));
      }
      num_tokens.push_back(c.num_tokens);
      context_len.push_back(c.start + c.num_tokens);
      chunk_seqs.push_back(&s);
      max_blocks = std::max(max_blocks, s.table.blocks().size());
      if (c.samples) {
        sample_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
        out.sampling.push_back(&s);
      }
    }
  }
  const auto C = static_cast<int64_t>(chunk_seqs.size()), B = static_cast<int64_t>(max_blocks);
  const auto N = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(sample_rows.size());
  out.data = {packed_int(N, "tokens"), packed_int(C, "chunks"), packed_int(S, "sample rows"),
              packed_int(static_cast<int64_t>(plan.decodes.size()), "decodes"), packed_int(B, "blocks"),
              packed_int(scheduler.options().block_size, "block size")};
  out.data.reserve(static_cast<size_t>(packed_step_size(N, C, S, B)));
  for (const auto* v : {&tokens, &positions, &slots, &query_start, &num_tokens, &context_len})
    out.data.insert(out.data.end(), v->begin(), v->end());
  for (const Sequence* s : chunk_seqs) {  // one row per chunk, padded with block 0 (never read)
    const auto& blocks = s->table.blocks();
    for (size_t b = 0; b < max_blocks; ++b) out.data.push_back(b < blocks.size() ? packed_int(blocks[b], "block") : 0);
  }
  out.data.insert(out.data.end(), sample_rows.begin(), sample_rows.end());
  return out;
}

model::PagedBatch unpack_step(std::span<const int32_t> data, const at::Device& device) {
  MT_CHECK(static_cast<int64_t>(data.size()) >= kPackedCounts, "unpack_step: ", data.size(), " ints, no header");
  const int64_t N = data[0], C = data[1], S = data[2], D = data[3], B = data[4], block_size = data[5];
  MT_CHECK(N >= 0 && C >= 0 && S >= 0 && D >= 0 && D <= C && B >= 1 && block_size >= 1 &&
               static_cast<int64_t>(data.size()) == packed_step_size(N, C, S, B),
           "unpack_step: ", data.size(), " ints for N ", N, ", C ", C, ", S ", S, ", decodes ", D, ", B ", B,
           ", block size ", block_size);
  model::PagedBatch batch;
  int64_t next = kPackedCounts;  // the first int not read yet
  const auto run = [&](int64_t n, at::ScalarType dtype) {
    auto t = packed_run(data, next, n, dtype, device);
    next += n;
    return t;
  };
  batch.tokens = run(N, at::kLong);
  batch.positions = run(N, at::kLong);
  batch.slots = run(N, at::kLong);
  const int64_t chunk_info = next;  // query_start, num_tokens, context_len: C each
  for (int64_t c = 0; c < C; ++c)
    batch.chunks.push_back({data[static_cast<size_t>(chunk_info + c)], data[static_cast<size_t>(chunk_info + C + c)],
                            data[static_cast<size_t>(chunk_info + 2 * C + c)]});
  next += 2 * C;
  batch.context_lens = run(C, at::kInt);
  const std::span<const int32_t> tables = data.subspan(static_cast<size_t>(next), static_cast<size_t>(C * B));
  batch.block_tables = run(C * B, at::kInt).view({C, B});
  batch.sample_rows = run(S, at::kLong);
  batch.num_decodes = D;
  if (D < C)  // prefill chunks: their index for flash's variable-length kernel, as make_step_batch gives it
    model::set_paged_prefill_index(
        batch, model::paged_prefill_index(batch.chunks, static_cast<size_t>(D), tables, B, block_size), device);
  return batch;
}

}  // namespace meshtrain::serve
