// PagedKvCache: the KV cache tensors the block pool's BlockIds index (docs/serving.md "Engine"): per layer, keys
// and values [num_blocks, block_size, H_kv, head_dim] in the dtype and on the device of the model's weights.
// The scheduler's BlockPool decides which blocks a sequence holds; this holds what is in them.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::serve {

class PagedKvCache {
 public:
  PagedKvCache(const model::TransformerImpl& model, int32_t num_blocks, int32_t block_size);

  std::vector<model::PagedLayerCache>& layers() { return layers_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  // Bytes of all layers' keys and values.
  int64_t bytes() const;

 private:
  int32_t num_blocks_, block_size_;
  std::vector<model::PagedLayerCache> layers_;
};

}  // namespace meshtrain::serve
