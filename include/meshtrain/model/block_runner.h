// BlockRunner: how the transformer runs each block, left open for the parallel layers.
//
// By default block i runs as `run(x)`. A runner wraps that call — activation checkpointing recomputes it in
// backward (model/activation_checkpoint.h), FSDP gathers the block's parameters before it and frees them
// after — without the model knowing about either (the model never talks to a communicator). Runners compose:
// the outer one is handed a `run` that calls the inner one.
//
// Ownership: `run` may be called again after the forward returned (recomputation in backward), so a BlockFn
// owns what it uses (captures by value), and so must any BlockFn a runner builds from it.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace meshtrain::model {

class BlockImpl;

using BlockFn = std::function<at::Tensor(const at::Tensor& x)>;
using BlockRunner = std::function<at::Tensor(int64_t layer, BlockImpl& block, const at::Tensor& x, const BlockFn& run)>;

// outer(layer, block, x, run') where run' = inner(layer, block, ·, run). Either may be empty (= plain call).
BlockRunner compose(BlockRunner outer, BlockRunner inner);

}  // namespace meshtrain::model
