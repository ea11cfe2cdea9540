#include "meshtrain/serve/engine/paged_kv_cache.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/paged_forward.h"

namespace meshtrain::serve {

PagedKvCache::PagedKvCache(const model::TransformerImpl& model, int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  MT_CHECK(num_blocks > 0 && block_size > 0, "PagedKvCache: ", num_blocks, " blocks of ", block_size, " tokens");
  layers_ = model::make_paged_cache(model, static_cast<int64_t>(num_blocks) + 1, block_size);  // + the scratch block
}

int64_t PagedKvCache::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l.k.nbytes() + l.v.nbytes();
  return n;
}

}  // namespace meshtrain::serve
