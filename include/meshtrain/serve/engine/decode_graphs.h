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
#include <vector>

#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {

// 1, 2, 4, … (powers of two below max_running), then max_running itself: [1, 2, 4, 8, 16, 24] for 24.
std::vector<int64_t> decode_graph_batch_sizes(int64_t max_running);

class DecodeGraphs {
 public:
  // Whether decode steps of `model` over `cache` can be captured: the model is on CUDA, this meshtrain was built
  // with CUDA, and the decode kernel takes the model's heads and dtype.
  static bool supported(const model::TransformerImpl& model, PagedKvCache& cache);

  // Captures one graph per size of `batch_sizes` (ascending, positive). Requires supported(). Error (one line,
  // naming --cuda-graphs) if a capture fails.
  DecodeGraphs(model::Transformer model, PagedKvCache& cache, std::vector<int64_t> batch_sizes);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Whether run() takes `batch`: decode-only (every chunk one token that samples), at most the largest size, and
  // block-table rows no wider than the captured ones.
  bool takes(const model::PagedBatch& batch) const;
  // The logits [b, V] (fp32) of a batch that takes() accepts, as model::paged_logits gives them; every row's keys
  // and values written into the cache. A view of the graph's output: valid until the next run().
  at::Tensor run(const model::PagedBatch& batch);

  const std::vector<int64_t>& batch_sizes() const { return sizes_; }
  // How many steps each size replayed, in batch_sizes()'s order (for tests and metrics).
  const std::vector<int64_t>& replays() const { return replays_; }
  // Wall time of the warm-ups and captures, in seconds.
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct Graphs;  // the CUDA graphs, their stream and outputs (CUDA builds only)
  // The static inputs, at the largest size: graph B reads and writes their first B rows.
  struct Buffers {
    at::Tensor tokens, positions, slots;  // [B_max] int64
    at::Tensor block_tables;              // [B_max, max_blocks] int32
    at::Tensor context_lens;              // [B_max] int32
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

  model::Transformer model_;
  PagedKvCache& cache_;
  std::vector<int64_t> sizes_, replays_;
  double capture_seconds_ = 0;
  Buffers buf_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace meshtrain::serve
