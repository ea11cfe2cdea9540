// MemoryCheckpoints: when a training run takes in-memory checkpoints (checkpoint.memory_every; the snapshots
// themselves are ckpt/host_checkpoints.h's) — whether at all, and how often.
//
//   memory_every N > 0   every N steps; a node whose memory file system cannot hold them is a UserError
//   memory_every -1      auto (the default): on where meshrun gave the workers a memory directory, the run resumes
//                        with checkpoint.resume auto (nothing else reads them) and the node's memory holds them;
//                        the interval is measured: one snapshot is taken 3 steps after the
//                        start, its whole cost (the copy that blocks the step plus the background write and replica
//                        swap, which take CPU time from the step on a busy host) against the step time gives the
//                        smallest interval at which snapshots cost ≤ 3 % of the run
//   memory_every 0       off
// What "holds them" means: each rank's state 5 times over (2 snapshots of its own, 2 replicas of a peer's, the host
// staging buffers; 3 on one node: plan::snapshot_copies) for every rank of the node within half of the memory
// file system's free space.
// Every decision is taken on the worst rank's figures (`max_over_ranks`), so every rank snapshots the same steps:
// the replica swap needs all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/ckpt/host_checkpoints.h"
#include "meshtrain/core/config.h"
#include "meshtrain/train/snapshot_staging.h"
#include "meshtrain/train/worker_setup.h"

namespace meshtrain::train {

class MemoryCheckpoints {
 public:
  using MaxOverRanks = std::function<double(double)>;  // collective: the largest of every rank's value

  // Null when off (one line says why where it was asked for or where auto finds too little memory). Collective.
  // `state_bytes`: this rank's model and optimizer blocks.
  static std::unique_ptr<MemoryCheckpoints> make(const Config& cfg, const WorkerSetup& w, const std::string& layout,
                                                 int64_t state_bytes, MaxOverRanks max_over_ranks);
  // The step the run starts at (after a resume): auto measures a snapshot a few steps after it.
  void start_at(int64_t step);

  // Whether a snapshot is taken after `done` steps (the same answer on every rank).
  bool due(int64_t done) const;
  // Collective. Takes it, once every rank's previous one is complete (the newest step they all hold is agreed
  // on, so that no rank prunes it); under auto, the first one is waited for and measured against `step_s` (this
  // rank's recent step time) to set the interval.
  void take(int64_t done, std::vector<ShardedTensor> blocks, const ckpt::SaveInfo& info, double step_s);
  // Before the step's optimizer update: the update waits for the last snapshot's copies (SnapshotStaging).
  void before_update() { staging_.before_update(); }
  ckpt::HostCheckpoints& store() { return *host_; }
  void wait() { host_->wait(); }

 private:
  MemoryCheckpoints(std::unique_ptr<ckpt::HostCheckpoints> host, int64_t every, MaxOverRanks max_over_ranks);
  void set_interval(double cost_s, double step_s);

  SnapshotStaging staging_;  // the copy to host memory, on a side stream on a GPU (outlives host_'s writer)
  std::unique_ptr<ckpt::HostCheckpoints> host_;
  int64_t every_;       // > 0: the interval; 0: auto, not yet measured
  int64_t probe_step_ = 0;  // auto: the step after which the measured snapshot is taken
  MaxOverRanks max_over_ranks_;
};

}  // namespace meshtrain::train
