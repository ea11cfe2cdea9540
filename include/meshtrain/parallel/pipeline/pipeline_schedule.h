// PipelineSchedule: a pipeline schedule as data — for each pipeline rank, the ordered list of compute actions
// it runs in one step (docs/pipeline.md). The executor (parallel/pipeline/pipeline_model.h) walks its rank's list;
// which activations and gradients travel where follows from each action, so the list is the whole schedule.
//
//   pp ranks, m micro-batches, v model chunks per rank (virtual stages: chunk c of rank r is virtual stage
//   c·pp + r, so a micro-batch visits rank 0, 1, …, pp−1, then rank 0 again for chunk 1, …)
//
//   gpipe             every forward, then every backward (m micro-batches of activations held)
//   1f1b              PipeDream-Flush / Megatron: pp − r − 1 warm-up forwards on rank r, then one forward
//                     and one backward in turn, then the remaining backwards (at most pp − r held)
//   interleaved-1f1b  Megatron's interleaved 1F1B over v chunks (m a multiple of pp): bubble ÷ v
//   zb-h1             Zero Bubble H1 (Qi et al. 2023): backward split into input (I) and weight (W) gradients;
//                     rank r defers its first r weight gradients into the cool-down, where 1F1B idles
//
// Letters: F forward, B full backward, I input-gradient backward, W weight-gradient backward; "F3" is micro-batch
// 3, "F3.1" micro-batch 3 of chunk 1 (written only when v > 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::parallel {

// gpipe | 1f1b | interleaved-1f1b | zb-h1 (parallel.pp_schedule; its spellings in core/config_enums.h).
using meshtrain::PipelineKind;

struct PipeAction {
  enum class Op : uint8_t { F, B, I, W };
  Op op;
  int micro;  // micro-batch, 0 … m−1
  int chunk;  // model chunk on this rank, 0 … v−1

  bool operator==(const PipeAction& o) const { return op == o.op && micro == o.micro && chunk == o.chunk; }
  // Holds activations for a backward still to come: F; releases them: B, W (I keeps what W needs).
  bool is_backward() const { return op != Op::F; }
};

struct PipelineSchedule {
  PipelineKind kind;
  int pp = 1, microbatches = 1, chunks = 1;
  std::vector<std::vector<PipeAction>> ranks;  // [pp] → that rank's actions in order

  int virtual_stages() const { return pp * chunks; }
  int virtual_stage(int rank, int chunk) const { return chunk * pp + rank; }
  // "F0 F1 B0 F2 B1 B2" (one rank's list, as the published tables write it).
  std::string describe(int rank) const;
};

// The schedule for pp ranks, m micro-batches and v chunks. MT_CHECK on arguments validate() rejects
// (interleaved-1f1b needs v ≥ 2 and m % pp == 0; the others v = 1; m ≥ 1).
PipelineSchedule make_pipeline_schedule(PipelineKind kind, int pp, int microbatches, int chunks = 1);

// The schedule run with fixed costs per action and free communication: when each action starts, the step's
// length, each rank's idle fraction (its bubble) and the most micro-batches whose activations each rank holds
// at once (forwarded, weight gradient not yet taken). Throws if the lists deadlock.
struct PipelineCosts {
  double forward = 1, backward = 2;            // B: input + weight gradients
  double backward_input = 1, backward_weight = 1;  // I and W of the split backward
};
struct PipelineTimeline {
  std::vector<std::vector<double>> start;  // [rank][action]
  double makespan = 0;
  std::vector<double> bubble;              // [rank]: idle time / makespan
  std::vector<int> peak_in_flight;         // [rank]
};
PipelineTimeline simulate_pipeline(const PipelineSchedule& s, const PipelineCosts& costs = {});

// (pp − 1) / (m + pp − 1): the idle fraction of GPipe and 1F1B with backward = 2 × forward.
double ideal_bubble_fraction(int pp, int microbatches);

}  // namespace meshtrain::parallel
