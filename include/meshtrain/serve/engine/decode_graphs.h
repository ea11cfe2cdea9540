// DecodeGraphs: decode-only engine steps replayed as CUDA graphs (docs/serving.md "CUDA graphs"). A decode step
// is hundreds of small kernels (per layer the norms, q/k/v, RoPE, the cache write, the decode kernel, the MLP)
// whose launch cost the host pays op by op; a replayed graph is one launch.
//
// For each batch size B of a list (1, 2, 4, … up to max_running: decode_graph_batch_sizes), the paged forward
// (model::paged_logits) of a decode-only batch of B rows is captured once over static device buffers — token ids,
// positions, slots [B], block tables [B, max_blocks] (the widest a sequence's can be: model.max_seq_len's blocks,
// at most the cache's), context lengths [B], sample rows arange(B) — and a static logits output [B, V]:
//
//   a decode batch of b rows ──copy──► rows [0, b) of the buffers of the smallest B ≥ b
//                             padding► rows [b, B): token 0 at position 0, context 1, over the scratch block
//   replay ──► logits[0, b)
//
// Padding rows write their keys and values into PagedKvCache::scratch_block(), a block the scheduler never hands
// out, so they never touch a sequence's cache.
//
// A step's rows can also come straight from the host (run(std::span<const DecodeRow>), what the engine does):
// written into pinned staging laid out as the static buffers, padding included, and copied in with two
// asynchronous copies (the per-row numbers, then the block tables' used columns) instead of a step batch's copy
// plus a dozen device copies and fills. With `argmax`, each graph also ends in the greedy pick (the logits'
// argmax, the op the sampler's greedy path runs), so a greedy step is one replay and one copy of the ids back
// (run_argmax).
//
// Captured eagerly, in the constructor, not on first use of a size: the first requests at each size pay no
// capture, a capture that fails does so at start-up, before anything is served, and the one memory pool that all
// the graphs share is laid out once, the largest size first so that the smaller ones reuse its blocks. The time
// is reported once on stderr.
//
// Graphs are used only where the decode kernel takes the batch (supported()): the reference attention reads each
// chunk's host values, which a replay would freeze. The model's weights and the cache must stay where they are
// (no .to(), no reallocation) while this lives: the graphs hold their addresses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/block_pool.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {

// One decode row of a step as the host holds it: the sequence's last token, its position and cache slot, the
// context it attends over (position + 1) and its block table.
struct DecodeRow {
  int64_t token = 0, position = 0, slot = 0;
  int32_t context_len = 0;
  std::span<const BlockId> blocks;
};

// 1, 2, 4, … (powers of two below max_running), then max_running itself: [1, 2, 4, 8, 16, 24] for 24.
std::vector<int64_t> decode_graph_batch_sizes(int64_t max_running);

class DecodeGraphs {
 public:
  // Whether decode steps of `model` over `cache` can be captured: the model is on CUDA, this meshtrain was built
  // with CUDA, and the decode kernel takes the model's heads and dtype.
  static bool supported(const model::TransformerImpl& model, PagedKvCache& cache);

  // Captures one graph per size of `batch_sizes` (ascending, positive), each ending in the rows' argmax where
  // `argmax`. Requires supported(). Error (one line, naming --cuda-graphs) if a capture fails.
  DecodeGraphs(model::Transformer model, PagedKvCache& cache, std::vector<int64_t> batch_sizes, bool argmax = true);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Whether run() takes `batch`: decode-only (every chunk one token that samples), at most the largest size, and
  // block-table rows no wider than the captured ones.
  bool takes(const model::PagedBatch& batch) const;
  // The logits [b, V] (fp32) of a batch that takes() accepts, as model::paged_logits gives them; every row's keys
  // and values written into the cache. A view of the graph's output: valid until the next run().
  at::Tensor run(const model::PagedBatch& batch);

  // Whether run(rows) takes `rows`: 1 to the largest size of them, none with more blocks than the captured width.
  bool takes(std::span<const DecodeRow> rows) const;
  // The same step from the host's rows (staged and copied in two copies): the logits [b, V], a view valid until
  // the next run.
  at::Tensor run(std::span<const DecodeRow> rows);
  // Whether the graphs end in the argmax (the constructor's `argmax`).
  bool has_argmax() const { return argmax_; }
  // Each row's greedy token (the argmax of its logits, taken inside the graph), copied to the host in one copy.
  // Requires has_argmax().
  std::vector<TokenId> run_argmax(std::span<const DecodeRow> rows);

  const std::vector<int64_t>& batch_sizes() const { return sizes_; }
  // How many steps each size replayed, in batch_sizes()'s order (for tests and metrics).
  const std::vector<int64_t>& replays() const { return replays_; }
  // Wall time of the warm-ups and captures, in seconds.
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct Graphs;  // the CUDA graphs, their stream and outputs (CUDA builds only)
  // The static inputs, at the largest size: graph B reads and writes their first B rows.
  // The per-row numbers are the rows of one [4, B_max] int64 tensor, so that one copy writes them all.
  struct Buffers {
    at::Tensor rows;                      // [4, B_max] int64: tokens, positions, slots; row 3 holds context_lens
    at::Tensor tokens, positions, slots;  // [B_max] int64, rows 0 to 2
    at::Tensor block_tables;              // [B_max, max_blocks] int32
    at::Tensor context_lens;              // [B_max] int32, the first half of row 3
    at::Tensor sample_rows;               // arange(B_max) int64
  };

  // A decode batch of B rows over the first B rows of the static buffers (what graph B reads and writes).
  model::PagedBatch static_batch(int64_t rows) const;
  // Rows [from, to) of the static buffers made padding.
  void pad_rows(int64_t from, int64_t to);
  // `batch`'s rows into rows [0, b) of the buffers, and rows [b, rows) padding.
  void copy_in(const model::PagedBatch& batch, int64_t rows);
  void capture_all();
  void capture(size_t index);
  // The graph index that a step of `b` rows replays.
  size_t graph_for(int64_t b) const;
  // `rows` and padding up to `size` rows written into the pinned staging and copied into the static buffers.
  void stage(std::span<const DecodeRow> rows, int64_t size);
  // Stages `rows` and replays their graph; returns its index.
  size_t replay_rows(std::span<const DecodeRow> rows);

  model::Transformer model_;
  PagedKvCache& cache_;
  std::vector<int64_t> sizes_, replays_;
  double capture_seconds_ = 0;
  bool argmax_ = true;
  Buffers buf_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace meshtrain::serve
