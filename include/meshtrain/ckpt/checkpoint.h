// Checkpoints: a directory per step under the checkpoint dir, written so that a crash at any moment leaves
// the previous complete checkpoint as `latest`:
//
//   <dir>/step_00000100/rank_00000.safetensors   this rank's tensors (replicated state: rank 0 only)
//   <dir>/step_00000100/meta.json                format version, step, every tensor's shape, dtype, file,
//                                                byte range and CRC-32, plus the trainer's JSON state
//   <dir>/latest                                 the name of the newest complete step directory
//
// Order: every writing rank fills step_N.tmp/ and fsyncs; a barrier; rank 0 writes meta.json, fsyncs,
// renames step_N.tmp → step_N, fsyncs the parent, then replaces `latest` (write latest.tmp + rename).
// Directories ending in .tmp are never loaded; rank 0 removes them when a manager starts. Only the newest
// `keep` checkpoints are kept.
//
// This first version stores replicated (data-parallel) state; sharded layouts and resharding on load build on
// the same meta.json (one entry per shard).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

inline constexpr int kFormatVersion = 1;

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, at::Tensor> tensors;  // CPU tensors, checksums verified
  nlohmann::json state;                       // the trainer's state (data position, RNG, config, ...)
  std::string path;
};

class CheckpointManager {
 public:
  // `comm` may be null for a single process. Rank 0 removes leftover *.tmp directories.
  CheckpointManager(std::string dir, int64_t keep, comm::CommPtr comm);

  // Collective: every rank calls it; ranks other than 0 contribute nothing to a replicated checkpoint.
  // Returns the final directory.
  std::string save(int64_t step, const std::map<std::string, at::Tensor>& tensors, const nlohmann::json& state);

  // The newest complete checkpoint (from `latest`), if any.
  std::optional<std::string> latest() const;
  // Reads a checkpoint directory (or a parent holding `latest`). Throws UserError naming file and tensor on
  // a checksum mismatch, a truncated file, or a missing/unsupported meta.json.
  static Checkpoint load(const std::string& path);

  const std::string& dir() const { return dir_; }

 private:
  void prune();

  std::string dir_;
  int64_t keep_;
  comm::CommPtr comm_;
};

}  // namespace meshtrain::ckpt
