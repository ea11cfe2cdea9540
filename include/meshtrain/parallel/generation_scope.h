// GenerationScope: what generation needs from the layout, handed out by ParallelModel::generation_scope().
// While it lives, the module holds full parameters (gathered from shards where the layout shards them) and,
// under sequence parallelism, plain tensor parallelism (one token at a time cannot be split over the tp
// group). The caller asks it whether this rank must run the generation too: under tensor parallelism the
// module's layers are collectives over the tp group, so every rank runs it (each group the same one).
//
//   auto scope = par->generation_scope();   // collective: every rank
//   if (rank == 0 || scope.every_rank_generates()) model::generate(par->net(), prompt, opts);
#pragma once

#include "meshtrain/parallel/tp/tensor_parallel.h"

namespace meshtrain::parallel {

class GenerationScope {
 public:
  // `tp`: the layout's tensor parallelism (null: none). Parameters are already gathered by the caller.
  explicit GenerationScope(const TensorParallel* tp) : plain_tp_(tp), every_rank_(tp != nullptr) {}
  GenerationScope(const GenerationScope&) = delete;
  GenerationScope& operator=(const GenerationScope&) = delete;

  bool every_rank_generates() const { return every_rank_; }

 private:
  TensorParallel::SequenceParallelOff plain_tp_;
  bool every_rank_;
};

}  // namespace meshtrain::parallel
