// PackedStep: one engine step's batch as one flat int32 array (docs/serving.md "Tensor parallelism"). Under
// tensor parallelism only rank 0 keeps the scheduler; it packs each step's plan, broadcasts it over the group
// (serve/engine/tp_steps.h), and every rank — rank 0 too — runs the batch unpacked from the same numbers, so
// the ranks cannot disagree on a token, a slot or a block. unpack_step gives exactly the batch make_step_batch
// (serve/engine/step_batch.h) makes for the plan.
//
// Layout (int32; N tokens, C chunks, S sampling rows, B block-table columns):
//   [N, C, S, num_decodes, B, block_size | tokens N | positions N | slots N | query_start C | num_tokens C | context_len C |
//    block tables C × B (row-major, padded with block 0) | sample rows S]
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

struct PackedStep {
  std::vector<int32_t> data;               // the layout above
  std::vector<const Sequence*> sampling;   // rank 0's only: the sequences whose rows sample, in sample-row order
};

// The step `plan` (just returned by scheduler.step()) packed. MT_CHECK on a slot or token id past int32.
PackedStep pack_step(const StepPlan& plan, const Scheduler& scheduler);

// The packed ints a step of this shape takes: 6 + 3N + 3C + C·B + S.
int64_t packed_step_size(int64_t tokens, int64_t chunks, int64_t sample_rows, int64_t max_blocks);

// The batch of a packed step, its tensors on `device` (int64 tokens, positions, slots and sample rows; int32 block
// tables and context lengths; the chunks on the host; the prefill chunks' index, model/paged_prefill_index.h). MT_CHECK when the sizes in `data` do not add up.
model::PagedBatch unpack_step(std::span<const int32_t> data, const at::Device& device);

}  // namespace meshtrain::serve
