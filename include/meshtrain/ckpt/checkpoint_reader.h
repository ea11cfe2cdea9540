// Loading a checkpoint into any layout (resharding). Each rank describes what it wants as ShardedTensors
// (core/sharded_tensor.h: a rectangular block of each global tensor, `local` the live storage to fill) and
// load_into fills them from whatever layout saved the checkpoint: for every saved shard whose block
// intersects a wanted block, the rank reads that shard's byte range (never a whole file, never a shard
// it does not need) through read_ranges (range_reader.h: large preads from a few threads, checksummed as
// they arrive), verifies its CRC, and copies the intersection into `local` (any device) — or, when the saved
// block is the wanted one in the same dtype in host memory, reads straight into `local`. Progress and ETA
// on rank 0 for a load that takes more than a few seconds (core/progress_meter.h).
//
// Errors (UserError, one line, naming the file and the tensor): a checksum mismatch or a truncated file — and,
// as IncompatibleCheckpoint, a tensor missing from the checkpoint, a global shape that differs, a dtype that
// cannot be converted.
// Dtype: floating-point tensors convert on load between F32, BF16, F16 and F64 (a bf16 export loads into
// fp32 master weights and back); any other dtype must match exactly.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

// A checkpoint that does not fit the run loading it — it lacks a tensor the run has, or holds one of another
// shape or of a dtype that does not convert — whatever state its bytes are in: the config's mistake, not
// damage. `checkpoint.resume: auto` stops at it instead of falling back to an older checkpoint (which the run
// would then overwrite, losing the newer one).
class IncompatibleCheckpoint : public UserError {
 public:
  using UserError::UserError;
};

struct LoadedCheckpoint {
  std::string path;  // the resolved step directory
  CheckpointMeta meta;
  uint64_t bytes_read = 0;  // the bytes of the saved shards this rank read (only those its blocks intersect)
};

// `path`: a step directory or a parent holding `latest`. Reads format versions 1 and 2.
LoadedCheckpoint load_into(const std::string& path, std::vector<ShardedTensor>& wanted);

// Whole tensors (CPU, saved dtype) for every saved tensor whose name starts with `prefix` (all if empty).
std::map<std::string, at::Tensor> load_full(const std::string& path, const std::string& prefix = "",
                                            LoadedCheckpoint* info = nullptr);

}  // namespace meshtrain::ckpt
