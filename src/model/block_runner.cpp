#include "meshtrain/model/block_runner.h"

namespace meshtrain::model {

BlockRunner compose(BlockRunner outer, BlockRunner inner) {
  if (!outer) return inner;
  if (!inner) return outer;
  return [outer, inner](int64_t layer, BlockImpl& block, const at::Tensor& x, const BlockFn& run) {
    BlockImpl* b = &block;  // modules outlive every forward and backward that runs them
    BlockFn through_inner = [inner, layer, b, run](const at::Tensor& h) { return inner(layer, *b, h, run); };
    return outer(layer, block, x, through_inner);
  };
}

}  // namespace meshtrain::model
