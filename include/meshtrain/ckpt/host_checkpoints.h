// HostCheckpoints: in-memory checkpoints (checkpoint.memory_every). Each rank keeps its own blocks in its node's
// memory and a replica of them in another node's, so a restart after a failure resumes from the newest step every
// rank can still reach instead of the last disk checkpoint (docs/resilience.md, "In-memory checkpoints").
//
// Where: `root`, the directory meshrun gives each node's workers in the node's memory file system (/dev/shm;
// launch/worker_env.h kHostCheckpointDirEnv, read by train/memory_checkpoints.h), which outlives a killed worker
// but not the node, and which meshrun removes when it exits. Under it:
//   rank_<R>/step_<N>/      rank R's own blocks at step N (model, optimizer, RNG), in the checkpoint format
//                           (checkpoint.h) but holding one rank's blocks only
//   replica_<Q>/step_<N>/   the same files of rank Q = R − ranks-per-node (the same local rank on the node before),
//                           received over a CPU-backend communicator of their own
// Kept: the steps from the newest one every rank had complete when this snapshot began (the caller agrees on it:
// save_async's `keep_from`), which is 2 each in the steady state. A count alone would not do: a rank whose write is
// slow can be a step behind another's, which then pruned the last step both had (found on a GPU, where a snapshot
// took longer than a step).
// With one node there are no replicas: losing the node loses its memory anyway.
//
// Saving: the caller's thread copies the blocks to host memory (the only blocked part), or hands over host copies
// of its own still landing (train/snapshot_staging.h: a side stream on a GPU); a background thread
// writes the own copy and then swaps replicas around the ring of nodes: rank R sends its files to
// R + ranks-per-node and receives those of R − ranks-per-node (even nodes send first, odd nodes receive first, so
// the ring cannot deadlock). A snapshot that fails to write is skipped with a warning (the disk checkpoints go on);
// the exchange still runs, empty, so no peer waits for it. A failed exchange (a peer gone) ends the snapshots of
// this attempt: newer own copies would prune the step whose replicas are complete.
//
// Restoring (collective, before training): every rank reports the steps of its own copies and of the replicas it
// holds; the newest step every rank can reach (its own copy, or the replica its peer holds) is chosen by all
// alike; a rank without its own copy of that step gets the files from the peer; each rank then loads from
// rank_<R>/step_<S> like any checkpoint. Only snapshots saved by the same layout (its description and world size)
// count: after a change of layout the disk checkpoints reshard, these do not.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

class HostCheckpoints {
 public:
  // Collective over the world: the replicas' own CPU communicator is made (none for one process).
  // `layout`: the layout's description.
  static std::unique_ptr<HostCheckpoints> open(std::string root, const comm::WorldInfo& world, std::string layout,
                                               std::chrono::milliseconds timeout);
  // `comm`: a CPU-backend communicator over the world, used for nothing else (null for one process).
  HostCheckpoints(std::string root, const comm::WorldInfo& world, std::string layout, comm::CommPtr comm);
  ~HostCheckpoints();  // waits for the background work
  HostCheckpoints(const HostCheckpoints&) = delete;
  HostCheckpoints& operator=(const HostCheckpoints&) = delete;

  // Collective. Waits for the previous snapshot, copies `blocks` (every one this rank holds: `write` is ignored)
  // to host memory and returns; writing and the replica swap run in the background, and then prune the steps
  // older than `keep_from` (the newest step every rank holds complete; at least 2 and at most 3 are kept).
  // `ready` set: `blocks` are the caller's own host copies (still landing until `ready` returns, which the writer
  // calls first: CheckpointManager::save_staged_async), written without another copy.
  SaveStats save_async(int64_t step, std::vector<ShardedTensor> blocks, const SaveInfo& info, int64_t keep_from = -1,
                       std::function<void()> ready = {});
  // The newest step of this rank's own complete snapshots, −1 for none (after wait()).
  int64_t newest_own() const;
  // Waits for the background work of the last snapshot (its failure is a warning, not an error).
  void wait();

  struct Restored {
    std::string dir;        // this rank's step directory to load from
    int64_t step = 0;
    int from_replicas = 0;  // ranks whose own copy was gone and that took their peer's replica
  };
  // Collective; before the first save_async. The newest step ≥ `at_least` that every rank reaches, fetched where
  // needed; nullopt when there is none (every rank then returns nullopt).
  std::optional<Restored> restore(int64_t at_least);

  // Where this rank's replica lives (its peer), and whether there are replicas at all (more than one node).
  int peer() const;
  bool replicates() const { return nodes_ > 1; }

 private:
  int source() const;        // the rank whose replica this rank holds
  bool sends_first() const;  // even nodes send first, odd ones receive first
  void finish_snapshot(int64_t step, int64_t keep_from);
  // One exchange: this rank's step directory `send_dir` to `to` (−1: none), and `from`'s (−1: none) into
  // `recv_dir` (written as <recv_dir>.tmp, then renamed). An empty or missing `send_dir` sends nothing, which the
  // receiver skips.
  void swap(int to, const std::string& send_dir, int from, const std::string& recv_dir);
  // The verified steps under `dir` saved by this layout, newest first (at most 2).
  std::vector<int64_t> steps_in(const std::string& dir) const;

  std::string root_, own_dir_, replica_dir_, layout_;
  comm::WorldInfo world_;
  int nodes_ = 1;
  comm::CommPtr comm_;  // CPU backend, used by one thread at a time (the caller's in restore, else worker_)
  std::unique_ptr<CheckpointManager> own_;
  std::thread worker_;
  bool ring_broken_ = false;  // a swap failed: no more snapshots (set by worker_, read after joining it)
};

}  // namespace meshtrain::ckpt
