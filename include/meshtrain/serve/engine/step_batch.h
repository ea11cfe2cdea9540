// StepBatch: a StepPlan made into the model's ragged batch (model/paged_batch.h) — the plan's chunks laid end to
// end, decodes first, each token's position and cache slot from its sequence's block table, and per chunk the
// block-table row its queries read through. Also names, in order, the sequences whose last row samples. A
// decode-only step can instead be made into host rows that a captured graph stages itself (make_decode_rows).
#pragma once

#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/serve/engine/decode_graphs.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

struct StepBatch {
  model::PagedBatch batch;
  std::vector<const Sequence*> sampling;  // one per row of batch.sample_rows, in that order
};

// The batch for `plan` (just returned by scheduler.step()) with its tensors on `device`.
StepBatch make_step_batch(const StepPlan& plan, const Scheduler& scheduler, const at::Device& device);

// The same step as host rows for a captured graph (DecodeGraphs::run(rows)), where every chunk of `plan` is a
// one-token decode that samples: each row what make_step_batch puts in the batch's row, `seqs` the sequences in
// row order (make_step_batch's `sampling`). False, and both cleared, for a plan with any other chunk.
bool make_decode_rows(const StepPlan& plan, const Scheduler& scheduler, std::vector<DecodeRow>& rows,
                      std::vector<const Sequence*>& seqs);

}  // namespace meshtrain::serve
