// Pipeline stage split: which contiguous blocks each virtual stage holds (docs/pipeline.md). The embedding
// goes to the first stage, final norm + head + loss to the last; the blocks are spread so that the largest
// stage (by parameter count, the embedding and head included) is as small as it can be, ties broken towards
// even block counts. The first/last stage can instead be given a fixed number of blocks (fewer, to make room
// for the embedding's and the loss's memory, as torchtitan and Megatron-LM allow); the others share the rest
// evenly.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/model/transformer.h"

namespace meshtrain::parallel {

struct StageSizes {
  int64_t n_layer = 0;
  double block = 0;  // parameters of one block
  double embed = 0;  // tok_embed + pos_embed
  double head = 0;   // final_norm + lm_head (tied: the head's copy of tok_embed)
};

// The parameter counts of `net` (whole, any device, meta included).
StageSizes stage_sizes(const model::TransformerImpl& net);

// `stages` spans in model order (virtual stage s = chunk · pp + rank). first/last_blocks 0 = balanced.
// MT_CHECK on a split that leaves a stage without a block (validate() rejects those configs first).
std::vector<model::ModelSpan> split_pipeline_stages(const StageSizes& sizes, int stages, int64_t first_blocks = 0,
                                                    int64_t last_blocks = 0);

}  // namespace meshtrain::parallel
