// PipelineBatch: the step's micro-batches (the trainer's grad_accum of them) concatenated and cut into the
// schedule's m pipeline micro-batches ("pieces"), each with what its stages need beyond tokens and targets,
// so that a pipeline computes the single process's loss and gradients (docs/pipeline.md "What a micro-batch
// carries"):
//   docs    packed documents: the positions cut with the rows; cu_seqlens re-based to each piece's first token
//           and its max_len recomputed. The boundaries are read on the host once per step (one small
//           device-to-host copy): a piece's exact list, since variable-length flash attention is not given
//           empty documents.
//   weight  loss-masked data (the trainer sets every micro-batch's loss_weight: its unmasked targets n_b ×
//           data ranks / the step's unmasked targets N): piece p's mean loss is multiplied by n_p · k, with
//           k = Σ_b w_b / Σ_b n_b (= data ranks / N), so Σ_p weight_p · mean_p = Σ_b w_b · mean_b — the token
//           mean of the whole step, however the pieces cut the micro-batches. A device scalar (no host read);
//           a piece without an unmasked target weighs 0 and runs on one target made valid (its backward still
//           runs, as zeros), as ParallelModel::forward_backward does.
//           Undefined when the micro-batches are unweighted: each piece's mean then counts 1/m.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "meshtrain/model/documents.h"
#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::parallel {

struct PipelinePiece {
  at::Tensor tokens, targets;  // [rows, T]
  model::Documents docs;       // packed documents of these rows; empty = each row one document
  at::Tensor weight;           // fp32 device scalar the piece's mean loss is multiplied by; undefined = 1/m
};

// `batches`: all packed or none, all weighted or none; their rows together a multiple of m.
std::vector<PipelinePiece> cut_pipeline_batch(const std::vector<ParallelModel::MicroBatch>& batches, int m);

}  // namespace meshtrain::parallel
