// Built on the host as flat vectors, packed into one staging buffer (pinned on CUDA) and copied to the device in one
// asynchronous copy: a step's batch is a dozen small arrays, and a copy each from pageable memory would wait on the
// device a dozen times a step.
#include "meshtrain/serve/engine/step_batch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "meshtrain/model/paged_prefill_index.h"

namespace meshtrain::serve {
namespace {

// Arrays of int64 and int32 laid end to end in one byte buffer, each at an 8-byte boundary, then copied to the
// device at once; each array becomes a view of the device copy.
class StepUpload {
 public:
  size_t add(const void* data, size_t bytes) {
    const size_t at = (size_ + 7) / 8 * 8;
    parts_.push_back({data, bytes, at});
    size_ = at + bytes;
    return parts_.size() - 1;
  }
  void copy_to(const at::Device& device) {
    auto host = at::empty({static_cast<int64_t>(std::max<size_t>(size_, 8))},
                          at::TensorOptions().dtype(at::kByte).pinned_memory(device.is_cuda()));
    for (const Part& p : parts_)
      if (p.bytes > 0) std::memcpy(host.data_ptr<uint8_t>() + p.at, p.data, p.bytes);
    on_device_ = device.is_cuda() ? host.to(device, /*non_blocking=*/true) : host;
  }
  at::Tensor view(size_t part, at::ScalarType dtype) const {
    const Part& p = parts_[part];
    return on_device_.narrow(0, static_cast<int64_t>(p.at), static_cast<int64_t>(p.bytes)).view(dtype);
  }

 private:
  struct Part {
    const void* data;
    size_t bytes, at;
  };
  std::vector<Part> parts_;
  size_t size_ = 0;
  at::Tensor on_device_;
};

template <typename T>
size_t add_vector(StepUpload& up, const std::vector<T>& v) {
  return up.add(v.data(), v.size() * sizeof(T));
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
  out.batch.num_decodes = static_cast<int64_t>(plan.decodes.size());
  const bool prefills = !plan.prefills.empty();
  const model::PagedPrefillIndex index =
      prefills ? model::paged_prefill_index(out.batch.chunks, plan.decodes.size(), tables,
                                            static_cast<int64_t>(max_blocks), scheduler.options().block_size)
               : model::PagedPrefillIndex{};
  StepUpload up;
  const size_t i_tokens = add_vector(up, tokens), i_positions = add_vector(up, positions),
               i_slots = add_vector(up, slots), i_samples = add_vector(up, sample_rows),
               i_tables = add_vector(up, tables), i_lens = add_vector(up, context_lens),
               i_ctx = add_vector(up, index.context_slots), i_cuq = add_vector(up, index.cu_queries),
               i_cuk = add_vector(up, index.cu_contexts);
  up.copy_to(device);
  out.batch.tokens = up.view(i_tokens, at::kLong);
  out.batch.positions = up.view(i_positions, at::kLong);
  out.batch.slots = up.view(i_slots, at::kLong);
  out.batch.sample_rows = up.view(i_samples, at::kLong);
  out.batch.block_tables = up.view(i_tables, at::kInt).view({static_cast<int64_t>(chunk_seqs.size()), -1});
  out.batch.context_lens = up.view(i_lens, at::kInt);
  if (prefills) {
    out.batch.prefill_context_slots = up.view(i_ctx, at::kLong);
    out.batch.prefill_cu_queries = up.view(i_cuq, at::kInt);
    out.batch.prefill_cu_contexts = up.view(i_cuk, at::kInt);
    out.batch.prefill_max_queries = index.max_queries;
    out.batch.prefill_max_context = index.max_context;
  }
  return out;
}

bool make_decode_rows(const StepPlan& plan, const Scheduler& scheduler, std::vector<DecodeRow>& rows,
                      std::vector<const Sequence*>& seqs) {
  rows.clear();
  seqs.clear();
  const bool decodes_only = plan.prefills.empty() && !plan.decodes.empty() &&
                            std::all_of(plan.decodes.begin(), plan.decodes.end(),
                                        [](const Chunk& c) { return c.num_tokens == 1 && c.samples; });
  if (!decodes_only) return false;
  for (const Chunk& c : plan.decodes) {
    const Sequence& s = scheduler.sequence(c.id);
    // make_step_batch's row of a one-token chunk at position c.start.
    rows.push_back({s.tokens[static_cast<size_t>(c.start)], c.start, s.table.slot(c.start), c.start + 1,
                    s.table.blocks()});
    seqs.push_back(&s);
  }
  return true;
}

}  // namespace meshtrain::serve
