// DataLoader: fixed-length windows of tokens from a set of shards, split disjointly over data-parallel ranks.
//
// The shards are cut into non-overlapping windows of seq_len + 1 tokens (inputs and shifted targets). Each
// epoch visits the windows in a permutation fixed by (seed, epoch) — or in order when shuffle is off — and
// every micro-batch takes world × B consecutive entries of it: rank r gets entries [r·B, (r+1)·B). So ranks
// never see the same window, the sequence is identical on every run, and its position is two integers
// (epoch, cursor) that a checkpoint saves and restores exactly. An epoch's tail shorter than world × B is
// skipped so every rank stays in step.
//
// Token ids are checked against the model's vocabulary as each window is copied (the copy reads them
// anyway: O(batch), no pass over the shards, which can be many GB): an id ≥ vocab_size is a UserError naming
// the file, the token's position in it and the id, instead of an index error deep inside the embedding.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

struct LoaderState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // index into the epoch's window order
  bool operator==(const LoaderState&) const = default;
};

struct LoaderOptions {
  std::string pattern;   // file or glob
  std::string what = "data.train";  // the config key, for error messages
  ShardFormat format = ShardFormat::Auto;
  int64_t seq_len = 256;
  int64_t batch_size = 8;  // per rank
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 1337;
  bool shuffle = true;
  int64_t vocab_size = 0;  // ids must be below it; 0 = not checked
};

struct Batch {
  at::Tensor inputs;   // [B, T] int64
  at::Tensor targets;  // [B, T] int64
};

class DataLoader {
 public:
  explicit DataLoader(LoaderOptions opts);

  Batch next();
  LoaderState state() const { return state_; }
  void restore(const LoaderState& s);
  void reset() { restore({}); }

  int64_t num_windows() const { return static_cast<int64_t>(window_start_.size()); }
  int64_t num_tokens() const { return total_tokens_; }
  // Micro-batches per epoch (all ranks together take one per step).
  int64_t batches_per_epoch() const { return num_windows() / (opts_.batch_size * opts_.world_size); }

 private:
  void make_order();
  // UserError for the first id ≥ vocab_size among the n tokens of `shard` from `start`, copied into `ids`.
  void check_ids(const TokenShard& shard, int64_t start, const int64_t* ids, int64_t n) const;

  LoaderOptions opts_;
  std::vector<TokenShard> shards_;
  std::vector<int32_t> window_shard_;   // window → shard index
  std::vector<int64_t> window_start_;   // window → first token in its shard
  std::vector<int64_t> order_;          // this epoch's window order
  int64_t total_tokens_ = 0;
  LoaderState state_;
};

}  // namespace meshtrain::data
