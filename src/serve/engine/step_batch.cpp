// Built on the host as flat vectors, then one copy per tensor to the device.
#include "meshtrain/serve/engine/step_batch.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace meshtrain::serve {
namespace {

at::Tensor step_batch_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  return at::tensor(v, at::kLong).to(device);
}

// int32 on the device (block ids and context lengths: what the decode kernel reads).
at::Tensor step_batch_int32(const std::vector<int32_t>& v, const at::Device& device) {
  return at::tensor(v, at::kInt).to(device);
}

}  // namespace

StepBatch make_step_batch(const StepPlan& plan, const Scheduler& scheduler, const at::Device& device) {
  StepBatch out;
  std::vector<int64_t> tokens, positions, slots, sample_rows;
  std::vector<int32_t> context_lens;
  std::vector<const Sequence*> chunk_seqs;
  size_t max_blocks = 1;
  for (const auto* chunks : {&plan.decodes, &plan.prefills}) {
    for (const Chunk& c : *chunks) {
      const Sequence& s = scheduler.sequence(c.id);
      const int64_t query_start = static_cast<int64_t>(tokens.size());
      for (int32_t p = c.start; p < c.start + c.num_tokens; ++p) {
        tokens.push_back(s.tokens[static_cast<size_t>(p)]);
        positions.push_back(p);
        slots.push_back(s.table.slot(p));
      }
      out.batch.chunks.push_back({query_start, c.num_tokens, c.start + c.num_tokens});
      context_lens.push_back(c.start + c.num_tokens);
      chunk_seqs.push_back(&s);
      max_blocks = std::max(max_blocks, s.table.blocks().size());
      if (c.samples) {
        sample_rows.push_back(query_start + c.num_tokens - 1);
        out.sampling.push_back(&s);
      }
    }
  }
  // [C, max_blocks], rows padded with block 0 (never read: a chunk reads only its context's blocks).
  std::vector<int32_t> tables(chunk_seqs.size() * max_blocks, 0);
  for (size_t c = 0; c < chunk_seqs.size(); ++c) {
    const auto& blocks = chunk_seqs[c]->table.blocks();
    std::copy(blocks.begin(), blocks.end(), tables.begin() + static_cast<std::ptrdiff_t>(c * max_blocks));
  }
  out.batch.tokens = step_batch_tensor(tokens, device);
  out.batch.positions = step_batch_tensor(positions, device);
  out.batch.slots = step_batch_tensor(slots, device);
  out.batch.block_tables = step_batch_int32(tables, device).view({static_cast<int64_t>(chunk_seqs.size()), -1});
  out.batch.sample_rows = step_batch_tensor(sample_rows, device);
  out.batch.context_lens = step_batch_int32(context_lens, device);
  out.batch.num_decodes = static_cast<int64_t>(plan.decodes.size());
  return out;
}

}  // namespace meshtrain::serve
