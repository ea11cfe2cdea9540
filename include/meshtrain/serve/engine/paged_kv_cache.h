// PagedKvCache: the KV cache tensors the block pool's BlockIds index (docs/serving.md "Engine"): per layer, keys
// and values [num_blocks, block_size, H_kv, head_dim] in the dtype and on the device of the model's weights.
// The scheduler's BlockPool decides which blocks a sequence holds; this holds what is in them.
//
// One block more than the pool's: block num_blocks() (scratch_block()) is never handed out by the scheduler,
// whose BlockIds run [0, num_blocks()). A captured decode step's padding rows write their keys and values there
// (serve/engine/decode_graphs.h), so padding never touches a sequence's cache.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::serve {

class PagedKvCache {
 public:
  // `num_blocks` as the scheduler's (SchedulerOptions::num_blocks); the tensors hold num_blocks + 1.
  PagedKvCache(const model::TransformerImpl& model, int32_t num_blocks, int32_t block_size);

  std::vector<model::PagedLayerCache>& layers() { return layers_; }
  // The blocks the scheduler hands out, the scratch block not counted.
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  // The block no sequence holds: padding's.
  int32_t scratch_block() const { return num_blocks_; }
  // Bytes of all layers' keys and values, the scratch block's included.
  int64_t bytes() const;

 private:
  int32_t num_blocks_, block_size_;
  std::vector<model::PagedLayerCache> layers_;
};

}  // namespace meshtrain::serve
