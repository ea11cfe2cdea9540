// TiedEmbedding: a pipeline's two copies of a tied token embedding (model.tie_embeddings: GPT-2, Llama 3.2
// 1B/3B). The first (virtual) stage's tok_embed.weight embeds the tokens; the last stage holds a copy of it
// for its head (model/transformer.h). The single model has one weight whose gradient is the sum of both
// uses; here each copy gets one use's, so:
//   - they start equal: built from the same name (model/init.h) and filled alike by a checkpoint; the last
//     stage's blocks are written by no rank (the checkpoint keeps one tensor), and broadcast() copies the
//     first stage's over anyway after start-up and loading;
//   - after the step's last backward sum_gradients() all-reduces (sum) the two gradients over a group of two
//     ranks of the pp dim, its first and last (Megatron-LM's embedding group), block by block: both stages
//     lay the weight out alike (same dp/fsdp/tp groups), so the two optimizer updates are the same and the
//     copies stay identical;
//   - the global gradient norm must count the weight once: counted_twice() is the squared norm of the last
//     stage's copy over its stage (each block once, by the `write` rule of sharded_parameters()), which the
//     pipeline subtracts from the sum of its stages' squares.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::parallel {

class TiedEmbedding {
 public:
  // Collective over `pp` (every pp rank calls it, in the same order, with the same `tied`); `world` spans every
  // stage's ranks. `chunks`: this rank's model chunks (the one holding the first or last virtual stage, if any,
  // holds a copy). Nothing to do when `tied` is false.
  TiedEmbedding(const comm::CommPtr& pp, comm::CommPtr world, bool tied,
                const std::vector<std::unique_ptr<ParallelModel>>& chunks);

  bool active() const { return static_cast<bool>(world_); }
  // The tied weight's gradient summed between its two copies (after the step's last backward).
  void sum_gradients();
  // The squared norm of the last stage's copy of the gradient, summed over that stage's ranks (every rank
  // returns it; collective over `world`): what the stages' summed squares count twice.
  at::Tensor counted_twice(const at::Device& device);
  // The first stage's copy of the weight onto the last stage's (collective over the pair).
  void broadcast();

 private:
  static constexpr const char* kName = "tok_embed.weight";

  comm::CommPtr pair_;   // the pp dim's first and last rank, first = 0; null elsewhere
  comm::CommPtr world_;  // null when there is nothing tied
  ParallelModel* copy_ = nullptr;  // this rank's chunk holding a copy (first or last virtual stage)
  bool last_ = false;              // the copy is the head's
};

}  // namespace meshtrain::parallel
