// The capture follows the trainer's (train/cuda_graph_step.h): warm-up runs on the side stream that captures (cuBLAS
// handles and workspaces, GEMM algorithm choices per shape and the allocator's blocks are set up outside capture),
// capture on that stream (capture cannot use the default stream), and replays on the caller's stream after the
// inputs were copied there.
#include "meshtrain/serve/engine/decode_graphs.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#ifdef MESHTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/kernels/paged_decode.h"
#include "meshtrain/model/paged_forward.h"

namespace meshtrain::serve {
namespace {

std::string decode_graph_sizes_text(const std::vector<int64_t>& sizes) {
  std::vector<std::string> parts;
  for (int64_t s : sizes) parts.push_back(std::to_string(s));
  return join(parts, ", ");
}

#ifdef MESHTRAIN_WITH_CUDA
// `to` runs what is queued on it from now only after what `from` has queued so far (no host wait).
void decode_graphs_wait(const c10::cuda::CUDAStream& to, const c10::cuda::CUDAStream& from) {
  c10::cuda::CUDAEvent ev;
  ev.record(from);
  ev.block(to);
}
#endif

}  // namespace

std::vector<int64_t> decode_graph_batch_sizes(int64_t max_running) {
  MT_CHECK(max_running >= 1, "decode_graph_batch_sizes: max_running ", max_running);
  std::vector<int64_t> out;
  for (int64_t b = 1; b < max_running; b *= 2) out.push_back(b);
  out.push_back(max_running);
  return out;
}

#ifdef MESHTRAIN_WITH_CUDA
struct DecodeGraphs::Graphs {
  explicit Graphs(c10::DeviceIndex device) : stream(c10::cuda::getStreamFromPool(false, device)) {}
  c10::cuda::CUDAStream stream;  // warm-up and capture run here
  // One pool for every graph. Sharing is safe here in any replay order: the graphs never run at once (one stream),
  // nothing one graph leaves behind is read by another, and each graph's logits stay allocated while it lives, so
  // a later capture never takes their blocks. A graph's replay may overwrite another's stale logits, which its
  // caller has read by then (run()'s output is valid until the next run()).
  decltype(at::cuda::graph_pool_handle()) pool = at::cuda::graph_pool_handle();
  struct Captured {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    at::Tensor logits;  // [B, V] fp32, in the pool; declared after the graph so that it is freed first
  };
  std::vector<Captured> graphs;  // batch_sizes()'s order
};
#else
struct DecodeGraphs::Graphs {};
#endif

bool DecodeGraphs::supported(const model::TransformerImpl& model, PagedKvCache& cache) {
  const at::Tensor& k = cache.layers().front().k;
  if (!k.is_cuda()) return false;
  const ModelConfig& cfg = model.config();
  const int64_t hd = cfg.d_model / cfg.n_head;
  const auto& wq = model.blocks->ptr<model::BlockImpl>(0)->attn->wq->weight;  // this rank's query heads
  // Where the kernel does not take the decodes, they go through the reference attention, which reads each chunk's
  // host values (a replay would freeze them): nothing can be captured. False in a build without CUDA kernels.
  return model::paged_decode_supported(at::empty({1, wq.size(0) / hd, hd}, wq.options().requires_grad(false)), k);
}

DecodeGraphs::DecodeGraphs(model::Transformer model, PagedKvCache& cache, std::vector<int64_t> batch_sizes)
    : model_(std::move(model)), cache_(cache), sizes_(std::move(batch_sizes)), replays_(sizes_.size(), 0) {
  MT_CHECK(!sizes_.empty() && sizes_.front() >= 1 && std::adjacent_find(sizes_.begin(), sizes_.end(),
                                                                        std::greater_equal<>()) == sizes_.end(),
           "DecodeGraphs: batch sizes [", decode_graph_sizes_text(sizes_), "] are not ascending positive numbers");
  MT_CHECK(supported(*model_, cache_), "DecodeGraphs: the decode kernel does not take this model on this cache");
  const int64_t rows = sizes_.back();
  const int64_t bs = cache_.block_size();
  // The widest table a sequence can have: the model's positions, or the whole cache if that is smaller. The
  // kernel splits its work by this width (not by the contexts, which it reads on the device), so no wider.
  const int64_t max_blocks =
      std::min<int64_t>((model_->config().max_seq_len + bs - 1) / bs, cache_.num_blocks());
  const auto longs = at::TensorOptions(at::kLong).device(cache_.layers().front().k.device());
  buf_.tokens = at::empty({rows}, longs);
  buf_.positions = at::empty({rows}, longs);
  buf_.slots = at::empty({rows}, longs);
  buf_.block_tables = at::empty({rows, max_blocks}, longs.dtype(at::kInt));  // the decode kernel's block ids
  buf_.context_lens = at::empty({rows}, longs.dtype(at::kInt));
  buf_.sample_rows = at::arange(rows, longs);
  pad_rows(0, rows);
  capture_all();
}

DecodeGraphs::~DecodeGraphs() = default;

model::PagedBatch DecodeGraphs::static_batch(int64_t rows) const {
  model::PagedBatch b;
  b.tokens = buf_.tokens.narrow(0, 0, rows);
  b.positions = buf_.positions.narrow(0, 0, rows);
  b.slots = buf_.slots.narrow(0, 0, rows);
  b.block_tables = buf_.block_tables.narrow(0, 0, rows);
  b.context_lens = buf_.context_lens.narrow(0, 0, rows);
  b.sample_rows = buf_.sample_rows.narrow(0, 0, rows);
  b.num_decodes = rows;
  // The host's chunks are read only by the reference attention, which a captured step never runs (only their
  // count is): the context lengths here are placeholders, the device's context_lens hold the real ones.
  b.chunks.reserve(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) b.chunks.push_back({i, 1, 1});
  return b;
}

void DecodeGraphs::pad_rows(int64_t from, int64_t to) {
  if (from >= to) return;
  const int64_t n = to - from, scratch = cache_.scratch_block();
  // Token 0 at position 0, attending over its own key at offset 0 of the scratch block, where it writes it.
  buf_.tokens.narrow(0, from, n).zero_();
  buf_.positions.narrow(0, from, n).zero_();
  buf_.slots.narrow(0, from, n).fill_(scratch * cache_.block_size());
  buf_.context_lens.narrow(0, from, n).fill_(1);
  buf_.block_tables.narrow(0, from, n).fill_(scratch);
}

bool DecodeGraphs::takes(const model::PagedBatch& batch) const {
  const int64_t b = batch.num_decodes;
  return b >= 1 && b <= sizes_.back() && static_cast<int64_t>(batch.chunks.size()) == b &&
         batch.tokens.size(0) == b && batch.sample_rows.size(0) == b && batch.block_tables.size(0) == b &&
         batch.block_tables.size(1) <= buf_.block_tables.size(1);
}

void DecodeGraphs::copy_in(const model::PagedBatch& batch, int64_t rows) {
  const int64_t b = batch.num_decodes;
  // On the caller's stream, as the replay: ordered before it, no host wait. copy_ converts to the buffers' dtypes.
  buf_.tokens.narrow(0, 0, b).copy_(batch.tokens, /*non_blocking=*/true);
  buf_.positions.narrow(0, 0, b).copy_(batch.positions, true);
  buf_.slots.narrow(0, 0, b).copy_(batch.slots, true);
  buf_.context_lens.narrow(0, 0, b).copy_(batch.context_lens, true);
  // Columns past a row's own blocks keep older values: the kernel reads only its context's blocks.
  buf_.block_tables.narrow(0, 0, b).narrow(1, 0, batch.block_tables.size(1)).copy_(batch.block_tables, true);
  // Every step, not only after a larger one left real rows there: five small fills, and no state to get wrong.
  pad_rows(b, rows);
}

#ifdef MESHTRAIN_WITH_CUDA

void DecodeGraphs::capture(size_t index) {
  Graphs& g = *graphs_;
  auto& slot = g.graphs[index];
  slot.graph = std::make_unique<at::cuda::CUDAGraph>();
  const model::PagedBatch batch = static_batch(sizes_[index]);
  c10::cuda::CUDAStreamGuard on_side(g.stream);
  try {
    slot.graph->capture_begin(g.pool);
    slot.logits = model::paged_logits(*model_, batch, cache_.layers());  // recorded, not run
    slot.graph->capture_end();
  } catch (const std::exception& e) {
    try {
      slot.graph->capture_end();  // ends the stream's capture and the allocator's routing into the pool
    } catch (const std::exception&) {
    }
    MT_CHECK(false, "CUDA graphs: capturing the decode step of batch size ", sizes_[index], " failed (", e.what(),
             "); --cuda-graphs off runs every step eagerly");
  }
}

void DecodeGraphs::capture_all() {
  const auto start = std::chrono::steady_clock::now();
  const c10::DeviceIndex device = buf_.tokens.device().index();
  graphs_ = std::make_unique<Graphs>(device);
  Graphs& g = *graphs_;
  const auto current = c10::cuda::getCurrentCUDAStream(device);
  decode_graphs_wait(g.stream, current);  // the buffers' padding was written on the caller's stream
  {
    // Every size once, eagerly: all rows are padding, so the warm-up writes the scratch block only.
    c10::cuda::CUDAStreamGuard on_side(g.stream);
    for (int64_t rows : sizes_) model::paged_logits(*model_, static_batch(rows), cache_.layers());
  }
  // As torch.cuda.graph does: nothing in flight, and the warm-up's cached blocks returned, so the pool does not
  // sit beside memory nobody uses.
  torch::cuda::synchronize(device);
  c10::cuda::CUDACachingAllocator::emptyCache();
  g.graphs.resize(sizes_.size());
  for (size_t i = sizes_.size(); i-- > 0;) capture(i);  // the largest first: the smaller reuse its blocks
  decode_graphs_wait(current, g.stream);
  capture_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("CUDA graphs: decode steps of batch sizes %s captured in %.2f s; --cuda-graphs off runs them eagerly",
            decode_graph_sizes_text(sizes_).c_str(), capture_seconds_);
}

at::Tensor DecodeGraphs::run(const model::PagedBatch& batch) {
  MT_CHECK(takes(batch), "DecodeGraphs::run: a batch of ", batch.chunks.size(), " chunks (", batch.num_decodes,
           " decodes) it does not take");
  const int64_t b = batch.num_decodes;
  const auto i = static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), b) - sizes_.begin());
  copy_in(batch, sizes_[i]);
  graphs_->graphs[i].graph->replay();  // on the caller's stream, after copy_in
  ++replays_[i];
  return graphs_->graphs[i].logits.narrow(0, 0, b);
}

#else

void DecodeGraphs::capture(size_t) {}
void DecodeGraphs::capture_all() {}
at::Tensor DecodeGraphs::run(const model::PagedBatch&) {
  MT_CHECK(false, "CUDA graphs: this meshtrain was built without CUDA");
  return {};
}

#endif

}  // namespace meshtrain::serve
