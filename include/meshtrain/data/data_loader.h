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
// Several sources (data.train as a list, core/data_sources.h) are a mixture: each source has its own windows,
// its own order per (seed, source, its epoch) and its own position; the stream of windows is dealt to the
// sources by their weights (data/source_mix.h: within one window of each share over any span), world × B
// entries per micro-batch as above, every rank dealing the whole stream so that all hold the same position.
// The position is then the stream's length (cursor) and each source's (epoch, cursor); a source's epoch
// wraps on its own (a source of weight 0.9 and few tokens is seen many times while another is not yet done).
// Without weights the weights are the sources' window counts: one pass over each in the time of one epoch.
//
// Shards read as raw uint16 because data.format auto found no llm.c header magic are named in one log line
// (rank 0): such a file may as well hold uint32 tokens or something else, which nothing else would reveal.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/core/data_sources.h"
#include "meshtrain/data/source_mix.h"
#include "meshtrain/data/token_flags.h"
#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

// One source's place in a mixture: its epoch and the index into that epoch's order of its windows.
struct SourcePosition {
  int64_t epoch = 0;
  int64_t cursor = 0;
  bool operator==(const SourcePosition&) const = default;
};

struct LoaderState {
  int64_t epoch = 0;   // one source: the epoch; a mixture: 0 (each source has its own)
  int64_t cursor = 0;  // one source: index into the epoch's window order; a mixture: windows dealt so far
  std::vector<SourcePosition> sources;  // a mixture's, one per source; empty for one source
  bool operator==(const LoaderState&) const = default;
};

struct LoaderOptions {
  std::vector<DataSource> sources;  // files or globs; several = a mixture (weights all given or none)
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
  // Held-out data (validation, `meshtrain eval`): one source with fewer than batch_size × world_size windows
  // reads batches of windows / world_size instead (one window a rank at least), said in one line; training data
  // must fill whole batches.
  bool fit_batch = false;
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
  void reset();  // to the start (every source's)

  int64_t num_windows() const { return static_cast<int64_t>(window_start_.size()); }
  int64_t batch_size() const { return opts_.batch_size; }  // per rank (LoaderOptions::fit_batch may lower it)
  // Sources: the patterns as given, their windows and (a mixture) their shares of the stream.
  size_t num_sources() const { return opts_.sources.size(); }
  const std::string& source_pattern(size_t s) const { return opts_.sources[s].pattern; }
  int64_t source_windows(size_t s) const { return source_first_[s + 1] - source_first_[s]; }
  // Windows each source has given the whole job (every rank) so far; empty for one source.
  const std::vector<int64_t>& windows_drawn() const { return drawn_; }
  // Some targets are masked (loss masks, document starts, padding): the loss needs the step's token count.
  bool masks_targets() const { return !flags_.empty(); }
  int64_t num_tokens() const { return total_tokens_; }
  // Micro-batches per epoch (all ranks together take one per step).
  int64_t batches_per_epoch() const { return num_windows() / (opts_.batch_size * opts_.world_size); }

 private:
  // Opens every source's shards (window ranges follow in make_windows).
  void open_sources();
  void make_order();
  // A mixture: source s's window order for its epoch; its next window (its position advanced, its epoch
  // wrapped when done); the windows of this rank's next micro-batch.
  void make_source_order(size_t s);
  int64_t take_window(size_t s);
  std::vector<int64_t> deal_mixture();
  // One source: the windows of this rank's next micro-batch (a new epoch's order when this one cannot fill it).
  std::vector<int64_t> deal_one_source();
  // Windows of seq_len + 1 tokens every seq_len tokens (packing), or one per document (no packing).
  void make_windows();
  // LoaderOptions::fit_batch: a smaller batch where the one source holds fewer windows than a whole one.
  void fit_batch_to_windows();
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
  std::vector<int32_t> shard_source_;   // shard → source index
  std::vector<int64_t> source_first_;   // source s's windows are [source_first_[s], source_first_[s + 1])
  std::vector<int32_t> window_shard_;   // window → shard index
  std::vector<int64_t> window_start_;   // window → first token in its shard
  std::vector<int64_t> window_len_;     // window → tokens (seq_len + 1, or a shorter document unpacked)
  std::vector<TokenFlags> flags_;       // one per shard, or none (shards without sidecars)
  std::vector<int64_t> order_;          // this epoch's window order (one source)
  std::optional<SourceMix> mix_;        // several sources: who gets each window of the stream
  std::vector<std::vector<int64_t>> source_order_;  // a mixture: each source's window order for its epoch
  std::vector<int64_t> drawn_;          // a mixture: windows taken from each source (epoch × windows + cursor)
  int64_t total_tokens_ = 0;
  LoaderState state_;
};

}  // namespace meshtrain::data
