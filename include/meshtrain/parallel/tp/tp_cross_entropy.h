// Vocab-parallel cross-entropy (Megatron's vocab_parallel_cross_entropy): the loss of logits whose vocabulary
// is split over the tensor-parallel group, without any rank forming the full logits. Per token, three
// all-reduces of one number each: the max logit (for stability), the sum of exp(logit - max), and the target's
// logit (held by exactly one rank; the others contribute 0). loss = log(sum-exp) - (target logit - max).
// Backward is local: softmax of this rank's block minus the one-hot of the target where this rank holds it.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

// logits: [N, rows] (rows = this rank's vocabulary block, starting at global id `vocab_start`), any float
// dtype, computed in fp32; targets: [N] int64 global ids in [0, vocab). Returns the per-token loss [N] fp32.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        const comm::CommPtr& tp);

}  // namespace meshtrain::parallel
