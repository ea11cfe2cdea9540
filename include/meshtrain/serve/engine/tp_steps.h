// TensorParallelSteps: the serving engine's steps over a tensor-parallel group (docs/serving.md "Tensor
// parallelism"). Every rank holds its share of the model's heads and MLP (parallel/tp/) and its heads' part of
// every KV block; the block bookkeeping is the same for all, so only rank 0 keeps a scheduler. Before each step
// rank 0 broadcasts the step's batch packed as one int32 tensor (serve/engine/packed_step.h); every rank runs
// the paged forward on it (the TP layers' collectives inside), and rank 0 samples from the gathered logits: the
// other ranks never sample. A stop is broadcast the same way, so every rank leaves its loop; an idle rank 0
// broadcasts a heartbeat now and then so that the others' wait never reaches the group's timeout.
//
//   rank 0:  EngineOptions::tp = steps;  … Engine::step() calls steps->lead() …;  steps->stop();
//   others:  steps->follow(*model, cache);   // returns once rank 0 called stop()
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/step_batch.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve {

class TensorParallelSteps {
 public:
  // `group`: the tensor-parallel group (under meshrun the world); rank 0 leads. `heartbeat`: how long rank 0 may
  // stay idle before it broadcasts that nothing runs (well below the group's collective timeout).
  TensorParallelSteps(comm::CommPtr group, std::chrono::milliseconds heartbeat);

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  std::chrono::milliseconds heartbeat() const { return heartbeat_; }

  // Rank 0: broadcasts `plan` (the scheduler's latest) and returns the batch every rank runs, tensors on `device`.
  StepBatch lead(const StepPlan& plan, const Scheduler& scheduler, const at::Device& device);
  // Rank 0: tells the others that nothing runs yet (they wait on).
  void idle();
  // Rank 0: ends every other rank's follow(). Idempotent; after it, lead() and idle() are bugs.
  void stop();
  bool stopped() const { return stopped_; }

  // Every other rank: runs each step rank 0 leads on `model` over `cache` (the scheduler's num_blocks and block
  // size) until rank 0 calls stop(); returns the steps run. Lays out the model's projections fused first
  // (model/fused_projections.h), as rank 0's Engine does by default.
  int64_t follow(model::TransformerImpl& model, PagedKvCache& cache);

 private:
  enum class Message : int32_t { kStep = 1, kIdle = 2, kStop = 3 };
  void send(Message kind, const std::vector<int32_t>& payload);

  comm::CommPtr group_;
  std::chrono::milliseconds heartbeat_;
  bool stopped_ = false;
};

}  // namespace meshtrain::serve
