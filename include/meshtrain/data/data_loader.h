// DataLoader: fixed-length windows of tokens from a set of shards, split disjointly over data-parallel ranks.
//
// The shards are cut into non-overlapping windows of seq_len + 1 tokens (inputs and shifted targets). Each
// epoch visits the windows in a permutation fixed by (seed, epoch) — or in order when shuffle is off — and
// every micro-batch takes world × B consecutive entries of it: rank r gets entries [r·B, (r+1)·B). So ranks
// never see the same window, the sequence is identical on every run, and its position is two integers
// (epoch, cursor) that a checkpoint saves and restores exactly. An epoch's tail shorter than world × B is
// skipped so every rank stays in step.
//
// Shards with a token-flags sidecar (data/token_flags.h, written by scripts/prepare_instruct.py) carry a loss
// mask and document boundaries. Masked targets become -100 (no loss), and so does a target that starts a
// document (nothing of the previous document predicts it). With packing, windows cut the token stream as
// above and each batch says where its documents start (positions, cu_seqlens); without, every document is
// its own window, cut at seq_len + 1 tokens and padded with masked targets.
//
// Token ids are checked against the model's vocabulary when the shards are opened, one vectorised pass over
// each (docs/PERFORMANCE.md: its cost on a 1 GB shard): an id ≥ vocab_size is a UserError naming the file,
// the first bad token's position in it and the id — before the first step, instead of an index error deep
// inside the embedding when its window happens to be drawn.
//
// Shards read as raw uint16 because data.format auto found no llm.c header magic are named in one log line
// (rank 0): such a file may as well hold uint32 tokens or something else, which nothing else would reveal.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/token_flags.h"
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
  bool loss_mask = true;   // the sidecars' loss masks (false: every target counts; data.loss_mask: all)
  bool packing = true;     // several documents per window (false: one each, padded; data.packing)
};

struct Batch {
  at::Tensor inputs;   // [B, T] int64
  at::Tensor targets;  // [B, T] int64; -100 where no loss is taken
  // Packed documents (shards with boundaries, packing on); undefined otherwise (each row one document).
  at::Tensor positions;   // [B, T] int64: position within its document
  at::Tensor cu_seqlens;  // [n_docs + 1] int32: document starts over the flattened B·T tokens, then B·T
  int64_t max_doc_len = 0;
  int64_t loss_tokens = 0;  // targets that are not -100
};

class DataLoader {
 public:
  explicit DataLoader(LoaderOptions opts);

  Batch next();
  LoaderState state() const { return state_; }
  void restore(const LoaderState& s);
  void reset() { restore({}); }

  int64_t num_windows() const { return static_cast<int64_t>(window_start_.size()); }
  // Some targets are masked (loss masks, document starts, padding): the loss needs the step's token count.
  bool masks_targets() const { return !flags_.empty(); }
  int64_t num_tokens() const { return total_tokens_; }
  // Micro-batches per epoch (all ranks together take one per step).
  int64_t batches_per_epoch() const { return num_windows() / (opts_.batch_size * opts_.world_size); }

 private:
  void make_order();
  // Windows of seq_len + 1 tokens every seq_len tokens (packing), or one per document (no packing).
  void make_windows();
  // One row from the flag bytes `f` of its window's n tokens: targets [seq_len] set to -100 where masked (and
  // past n: padding); with `pos`, positions within documents and each document's start (row_offset + t)
  // appended to `starts`. Returns the targets that stay unmasked.
  int64_t apply_flags(const uint8_t* f, int64_t n, int64_t* tgt, int64_t* pos, std::vector<int32_t>* starts,
                      int64_t row_offset) const;
  // The loader's batch tensors for `rows` [B, seq_len + 1] read from the windows (targets masked by flags).
  Batch make_batch(const at::Tensor& rows, const std::vector<int64_t>& windows) const;
  // UserError for the first id ≥ vocab_size in any shard.
  void check_ids() const;
  // The log line naming the shards data.format auto reads as raw uint16, if any.
  void log_raw_shards() const;

  LoaderOptions opts_;
  std::vector<TokenShard> shards_;
  std::vector<int32_t> window_shard_;   // window → shard index
  std::vector<int64_t> window_start_;   // window → first token in its shard
  std::vector<int64_t> window_len_;     // window → tokens (seq_len + 1, or a shorter document unpacked)
  std::vector<TokenFlags> flags_;       // one per shard, or none (shards without sidecars)
  std::vector<int64_t> order_;          // this epoch's window order
  int64_t total_tokens_ = 0;
  LoaderState state_;
};

}  // namespace meshtrain::data
