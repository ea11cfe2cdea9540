// Activation checkpointing: run a block without keeping its activations, and run it again in backward to get
// them (Chen et al. 2016; torch.utils.checkpoint's reentrant variant). Memory per block drops to its input;
// compute grows by one forward of the block.
//
// The recomputation restores the device RNG state and the autocast state of the original forward, so
// dropout masks and bf16 casts are identical and gradients match the plain run exactly.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "meshtrain/model/block_runner.h"

namespace meshtrain::model {

// y = run(x), recomputed in backward. `params` are the tensors `run` reads that need gradients (the block's
// parameters): their gradients flow out of this node like any other op's, so gradient hooks (DDP, FSDP) fire
// as usual. In no-grad mode it is just run(x).
at::Tensor checkpointed(const BlockFn& run, const at::Tensor& x, const std::vector<at::Tensor>& params);

// A BlockRunner that checkpoints every block (compose it inside FSDP's runner: FSDP gathers, then this runs).
BlockRunner activation_checkpointing_runner();

}  // namespace meshtrain::model
