// CheckpointManager: sharded checkpoints written so that a crash at any moment leaves the previous complete
// checkpoint as `latest` (format: checkpoint_meta.h; loading into any layout: checkpoint_reader.h).
//
//   <dir>/step_00000100/rank_00003.safetensors   the blocks rank 3 writes (its ShardedTensors with write set)
//   <dir>/step_00000100/meta.json                every tensor's global shape, dtype and shards, config, mesh,
//                                                trainer state
//   <dir>/latest                                 the name of the newest complete step directory
//
// Save protocol (every rank calls save/save_async with its own shards):
//   caller's thread: wait for the previous save; copy this rank's `write` blocks to host memory (pinned for
//     CUDA tensors) — the only time the training loop is blocked;
//   background thread: write step_N.tmp/rank_R.safetensors and fsync it; all-gather every rank's shard list
//     (lengths, then JSON bytes) over a communicator split off for checkpoints, so it never interleaves with
//     the training loop's collectives; rank 0 checks the blocks tile every tensor exactly, writes meta.json
//     (tmp + fsync + rename), fsyncs, renames step_N.tmp → step_N, fsyncs the parent, moves `latest` (tmp +
//     rename) and prunes to the newest `keep`; an all-reduce of rank 0's status tells every rank it committed.
// A directory is loadable only once renamed with its meta.json inside; *.tmp directories are never loaded and
// rank 0 removes them when a manager starts. The format version 1 (replicated, earlier meshtrain) still loads.
#pragma once

#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

// What meta.json records beside the tensors.
struct SaveInfo {
  nlohmann::json config = nlohmann::json::object();  // the run's resolved config
  nlohmann::json mesh = nlohmann::json::object();    // the layout that wrote it (caller's description)
  nlohmann::json state = nlohmann::json::object();   // trainer state: data position, scheduler, ...
};

struct SaveStats {
  double blocked_s = 0;  // caller's thread: waiting for the previous save + copying to host
  double wait_s = 0;     // of which waiting for the previous save
  uint64_t bytes = 0;    // this rank's bytes
};

// Whole tensors of a checkpoint (CPU, checksums verified), as the replicated API returns them.
struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json state;
  nlohmann::json config;
  std::string path;
};

class CheckpointManager {
 public:
  // `comm` may be null for a single process. Collective: rank 0 removes leftover *.tmp directories, and a
  // checkpoint communicator is split off `comm`.
  CheckpointManager(std::string dir, int64_t keep, comm::CommPtr comm);
  // Waits for a pending save; its error is logged (call wait() to see it).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Collective. Copies, starts the background write and returns; the blocks in `tensors` may change as
  // soon as it returns.
  SaveStats save_async(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info);
  // Blocks until the pending save (if any) is committed on every rank; rethrows its error. Returns the
  // seconds waited.
  double wait();
  // save_async + wait, but CPU tensors are written straight from the caller's memory (it is blocked until
  // the commit, so nothing changes under the writer); returns the step directory.
  std::string save(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info);

  // save_async for host tensors the caller has already copied and will not touch until the save is waited for
  // (its own staging): written as they are, no second copy. `ready` runs on the writer thread before it reads them
  // (waits for the copies still landing in them, e.g. a device-to-host copy on a side stream).
  SaveStats save_staged_async(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info,
                              std::function<void()> ready);

  // Replicated state (every rank holds all of it; rank 0 writes it): the API the trainer started with.
  // `state["config"]`, if present, is also recorded as the checkpoint's config.
  std::string save(int64_t step, const std::map<std::string, at::Tensor>& tensors, const nlohmann::json& state);
  SaveStats save_async(int64_t step, const std::map<std::string, at::Tensor>& tensors, const nlohmann::json& state);

  // The newest complete checkpoint (from `latest`), if any.
  std::optional<std::string> latest() const;
  // Every tensor of a checkpoint (directory or a parent holding `latest`), whole. UserError naming file
  // and tensor on a checksum mismatch or a truncated file, or on a missing/unsupported meta.json.
  static Checkpoint load(const std::string& path);

  // Later saves print progress and ETA (ProgressMeter) under `label` while this rank writes its file: for
  // saves a person waits on (import, a final save); background saves during training stay quiet.
  void show_progress(std::string label) { progress_label_ = std::move(label); }

  // One rank's snapshot of its own blocks (ckpt/host_checkpoints.h; made with a null communicator): the blocks
  // need not cover their tensors, and saves log at debug level (they may come every step).
  void save_own_blocks_only() { own_blocks_only_ = true; }

  const std::string& dir() const { return dir_; }
  std::string step_dir(int64_t step) const;

 private:
  // Both saves: wait for the previous one, stage (`stage_cpu`: CPU tensors too) and start writer_.
  // `ready`: see save_staged_async (empty: nothing to wait for).
  SaveStats start_save(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info, bool stage_cpu,
                       std::function<void()> ready = {});
  // The background half of a save: write, gather, commit. Runs on writer_.
  void write_and_commit(int64_t step, std::map<std::string, at::Tensor> host, std::vector<ShardedTensor> layout,
                        SaveInfo info);
  void commit(int64_t step, const std::vector<std::string>& rank_lists, const SaveInfo& info);
  void prune();
  void crash_point_at(const char* stage, int64_t step) const;  // crash_point.h, for disk checkpoints only

  std::string dir_;
  std::string progress_label_;  // empty: no progress lines
  bool own_blocks_only_ = false;
  int64_t keep_;
  int rank_ = 0, world_ = 1;
  comm::CommPtr ckpt_comm_;  // split off the caller's communicator; used only by writer_
  // Host staging buffers, kept between saves (reused when a tensor's shape and dtype repeat): after the
  // first save, the copy touches no fresh pages and pins no new memory. Owned by the caller's thread; the
  // writer reads them until wait() returns, and save_async waits before refilling them.
  std::map<std::string, at::Tensor> staging_;
  std::thread writer_;
  std::exception_ptr error_;  // set by writer_, read after join
};

}  // namespace meshtrain::ckpt
