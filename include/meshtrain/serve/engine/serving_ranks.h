// ServingRanks: the processes a serving command (`meshtrain serve`, `meshtrain generate --input`) runs on, and the
// model each one holds (docs/serving.md "Tensor parallelism"). One process: the model whole, where the flags put
// it — exactly as without this file. Under meshrun (WORLD_SIZE > 1) every worker is one rank of a tensor-parallel
// group as wide as the world: its own GPU (--device cuda: cuda:LOCAL_RANK) or the CPU, a communicator over all of
// them (parallel.backend auto: NCCL on GPUs, the CPU backend otherwise), and its share of the model's heads, MLP
// and vocabulary cut by the trainer's TP layers (parallel/tp/tensor_parallel.h). Rank 0 leads (tp_steps.h).
#pragma once

#include <c10/core/TensorOptions.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/tp_steps.h"

namespace meshtrain::serve {

struct ServingRanks {
  comm::WorldInfo world;
  c10::TensorOptions placement;                // this rank's device and the weights' dtype
  comm::CommPtr group;                         // the tensor-parallel group (the world); null for one process
  std::shared_ptr<TensorParallelSteps> steps;  // over `group`; null for one process

  bool leader() const { return world.rank == 0; }
  int tp() const { return world.world_size; }
  // The smallest of every rank's `v` (collective under tensor parallelism): the KV blocks every rank can hold.
  int64_t min_over_ranks(int64_t v) const;
};

// The ranks of this job, from meshrun's environment. `placement`: --device and --dtype (model_placement.h); under
// meshrun --device cuda becomes each rank's own GPU and a given index (cuda:N) is refused in one line.
// `timeout`: how long a collective of the group may take before it is an error; an idle rank 0 broadcasts a
// heartbeat every quarter of it. Collective under meshrun.
ServingRanks join_serving_ranks(const c10::TensorOptions& placement, std::chrono::milliseconds timeout);

// Refuses in one line (UserError, exit 2) a model whose query heads, key/value heads or MLP width the group's
// `tp` ranks cannot split evenly, or whose vocabulary is smaller than `tp`.
void check_tensor_parallel_split(const ModelConfig& m, int tp);

// How the blocks' linear weights are held for serving: as loaded (in the placement's dtype), or in FP8
// (`--quantization fp8`: model/fp8_weights.h, docs/serving.md "FP8 weights").
enum class WeightQuantization { none, fp8 };
// `--quantization`'s value: none or fp8; UserError naming the flag otherwise.
WeightQuantization weight_quantization_from_flag(const std::string& value);

// The checkpoint's model on `ranks.placement`, in eval mode: whole for one process (ckpt::load_model: a LoRA
// checkpoint's adapters merged), else this rank's blocks only, read from the checkpoint as the trainer's TP layout
// (adapters kept beside their split weights). check_tensor_parallel_split first. With `quant` fp8 the blocks'
// weights (each rank's shards) are then held in FP8 and the memory they leave handed back to the device before the
// caller sizes its KV cache; refused in one line (UserError) on a GPU without FP8 matmuls.
model::Transformer load_serving_model(const ckpt::InferenceCheckpoint& ck, const ServingRanks& ranks,
                                      WeightQuantization quant = WeightQuantization::none);

}  // namespace meshtrain::serve
