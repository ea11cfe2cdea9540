// The transformer's inference step over a paged KV cache (docs/serving.md "Engine"): the same modules and
// weights as training's forward (model/transformer.h), run over a ragged batch of chunks (model/paged_batch.h).
// A separate entry point, so the training path keeps its code and its speed: it reuses the blocks' norms,
// projections and MLPs and replaces only attention, which writes the step's keys and values into the cache and
// reads each chunk's context back through its block table (model/paged_attention.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

// Empty caches for `model`: per layer, keys and values [num_blocks, block_size, H_kv, hd] in the dtype and on
// the device of its weights.
std::vector<PagedLayerCache> make_paged_cache(const TransformerImpl& model, int64_t num_blocks, int64_t block_size);

// Logits [S, V] (fp32) of `batch.sample_rows`, after writing every token's keys and values into `cache` (one
// entry per layer). Needs the whole model (no pipeline stage); runs without gradients, in eval mode semantics (no
// dropout). A tensor-parallel model (parallel/tp/) runs its share of the heads and the MLP over its heads' part of
// the cache, and its head's vocabulary shards are gathered (TransformerImpl::head_logits): every rank of the group
// calls it with the same batch, and every rank gets the full logits.
at::Tensor paged_logits(TransformerImpl& model, const PagedBatch& batch, std::vector<PagedLayerCache>& cache);

}  // namespace meshtrain::model
