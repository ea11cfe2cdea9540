// StepBatch: a StepPlan made into the model's ragged batch (model/paged_batch.h) — the plan's chunks laid end to
// end, decodes first, each token's position and cache slot from its sequence's block table, and per chunk the
// block-table row its queries read through. Also names, in order, the sequences whose last row samples.
#pragma once

#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

struct StepBatch {
  model::PagedBatch batch;
  std::vector<const Sequence*> sampling;  // one per row of batch.sample_rows, in that order
};

// The batch for `plan` (just returned by scheduler.step()) with its tensors on `device`.
StepBatch make_step_batch(const StepPlan& plan, const Scheduler& scheduler, const at::Device& device);

}  // namespace meshtrain::serve
