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

#include "meshtrain/core/cuda_check.h"
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
    at::Tensor ids;     // [B] int64, the rows' argmax (with `argmax`), in the pool too
  };
  std::vector<Captured> graphs;  // batch_sizes()'s order
  // The host side of run(rows): the static buffers' layout in pinned memory, and the ids coming back. `staged`
  // follows the copies out of the staging, so that the next step does not overwrite it while they are queued.
  at::Tensor host_rows, host_tables, host_ids;
  c10::cuda::CUDAEvent staged;
};
#else
struct DecodeGraphs::Graphs {};
#endif

bool DecodeGraphs::supported(const model::TransformerImpl& model, PagedKvCache& cache) {
  const at::Tensor& k = cache.layers().front().k;
  if (!k.is_cuda()) return false;
  const ModelConfig& cfg = model.config();
  const int64_t hd = cfg.d_model / cfg.n_head;
  // This rank's query heads; the device is the cache's (a weight held in FP8 keeps only its shape and dtype).
  const auto& wq = model.blocks->ptr<model::BlockImpl>(0)->attn->wq->weight;
  const auto q = at::empty({1, wq.size(0) / hd, hd}, wq.options().device(k.device()).requires_grad(false));
  // Where the kernel does not take the decodes, they go through the reference attention, which reads each chunk's
  // host values (a replay would freeze them): nothing can be captured. False in a build without CUDA kernels.
  return model::paged_decode_supported(q, k);
}

DecodeGraphs::DecodeGraphs(model::Transformer model, PagedKvCache& cache, std::vector<int64_t> batch_sizes,
                           bool argmax)
    : model_(std::move(model)),
      cache_(cache),
      sizes_(std::move(batch_sizes)),
      replays_(sizes_.size(), 0),
      argmax_(argmax) {
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
  buf_.rows = at::empty({4, rows}, longs);
  buf_.tokens = buf_.rows[0];
  buf_.positions = buf_.rows[1];
  buf_.slots = buf_.rows[2];
  buf_.context_lens = buf_.rows[3].view(at::kInt).narrow(0, 0, rows);  // [2 · rows] int32, the first half
  buf_.block_tables = at::empty({rows, max_blocks}, longs.dtype(at::kInt));  // the decode kernel's block ids
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

bool DecodeGraphs::takes(std::span<const DecodeRow> rows) const {
  const auto b = static_cast<int64_t>(rows.size());
  if (b < 1 || b > sizes_.back()) return false;
  for (const DecodeRow& r : rows)
    if (r.blocks.empty() || static_cast<int64_t>(r.blocks.size()) > buf_.block_tables.size(1)) return false;
  return true;
}

size_t DecodeGraphs::graph_for(int64_t b) const {
  return static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), b) - sizes_.begin());
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
    if (argmax_) slot.ids = slot.logits.argmax(-1);                       // the sampler's greedy op
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
    for (int64_t rows : sizes_) {
      const auto logits = model::paged_logits(*model_, static_batch(rows), cache_.layers());
      if (argmax_) (void)logits.argmax(-1);
    }
  }
  // Pinned, so that the copies in and out are asynchronous and need no bounce buffer.
  const auto pinned = at::TensorOptions().pinned_memory(true);
  g.host_rows = at::empty(buf_.rows.sizes(), pinned.dtype(at::kLong));
  g.host_tables = at::empty(buf_.block_tables.sizes(), pinned.dtype(at::kInt));
  g.host_ids = at::empty({sizes_.back()}, pinned.dtype(at::kLong));
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
  const size_t i = graph_for(b);
  copy_in(batch, sizes_[i]);
  graphs_->graphs[i].graph->replay();  // on the caller's stream, after copy_in
  ++replays_[i];
  return graphs_->graphs[i].logits.narrow(0, 0, b);
}

void DecodeGraphs::stage(std::span<const DecodeRow> rows, int64_t size) {
  Graphs& g = *graphs_;
  g.staged.synchronize();  // the previous step's copies have read the staging (at once after a step's sync)
  const int64_t cap = g.host_rows.size(1), width = g.host_tables.size(1);
  int64_t* tokens = g.host_rows.data_ptr<int64_t>();
  int64_t *positions = tokens + cap, *slots = tokens + 2 * cap;
  auto* context_lens = reinterpret_cast<int32_t*>(tokens + 3 * cap);  // row 3 viewed as int32, as buf_ does
  int32_t* tables = g.host_tables.data_ptr<int32_t>();
  const auto b = static_cast<int64_t>(rows.size());
  const int64_t scratch = cache_.scratch_block();
  size_t used = 1;  // block-table columns any row reads
  for (int64_t i = 0; i < size; ++i) {
    // Rows past the step's are pad_rows()'s padding: token 0 at position 0 over the scratch block.
    const DecodeRow pad{0, 0, scratch * cache_.block_size(), 1, {}};
    const DecodeRow& r = i < b ? rows[static_cast<size_t>(i)] : pad;
    tokens[i] = r.token;
    positions[i] = r.position;
    slots[i] = r.slot;
    context_lens[i] = r.context_len;
    int32_t* row = tables + i * width;
    if (r.blocks.empty()) row[0] = static_cast<int32_t>(scratch);
    std::copy(r.blocks.begin(), r.blocks.end(), row);  // columns past a row's blocks are never read
    used = std::max(used, r.blocks.size());
  }
  // On the caller's stream, as the replay. Rows past `size` carry stale values that graph `size` never reads.
  const auto stream = c10::cuda::getCurrentCUDAStream(buf_.rows.device().index());
  CUDA_CHECK(cudaMemcpyAsync(buf_.rows.data_ptr(), tokens, static_cast<size_t>(g.host_rows.nbytes()),
                             cudaMemcpyHostToDevice, stream.stream()));
  const size_t pitch = static_cast<size_t>(width) * sizeof(int32_t);
  CUDA_CHECK(cudaMemcpy2DAsync(buf_.block_tables.data_ptr(), pitch, tables, pitch, used * sizeof(int32_t),
                               static_cast<size_t>(size), cudaMemcpyHostToDevice, stream.stream()));
  g.staged.record(stream);
}

size_t DecodeGraphs::replay_rows(std::span<const DecodeRow> rows) {
  MT_CHECK(takes(rows), "DecodeGraphs::run: ", rows.size(), " decode rows it does not take");
  const size_t i = graph_for(static_cast<int64_t>(rows.size()));
  stage(rows, sizes_[i]);
  graphs_->graphs[i].graph->replay();  // on the caller's stream, after the copies
  ++replays_[i];
  return i;
}

at::Tensor DecodeGraphs::run(std::span<const DecodeRow> rows) {
  const size_t i = replay_rows(rows);
  return graphs_->graphs[i].logits.narrow(0, 0, static_cast<int64_t>(rows.size()));
}

std::vector<TokenId> DecodeGraphs::run_argmax(std::span<const DecodeRow> rows) {
  MT_CHECK(argmax_, "DecodeGraphs::run_argmax: the graphs were captured without the argmax");
  const size_t i = replay_rows(rows);
  const auto b = static_cast<int64_t>(rows.size());
  auto host = graphs_->host_ids.narrow(0, 0, b);
  host.copy_(graphs_->graphs[i].ids.narrow(0, 0, b), /*non_blocking=*/true);  // the step's one copy back
  c10::cuda::getCurrentCUDAStream(buf_.rows.device().index()).synchronize();
  const int64_t* ids = host.data_ptr<int64_t>();
  return {ids, ids + b};
}

#else

void DecodeGraphs::capture(size_t) {}
void DecodeGraphs::capture_all() {}
at::Tensor DecodeGraphs::run(const model::PagedBatch&) {
  MT_CHECK(false, "CUDA graphs: this meshtrain was built without CUDA");
  return {};
}
void DecodeGraphs::stage(std::span<const DecodeRow>, int64_t) {}
size_t DecodeGraphs::replay_rows(std::span<const DecodeRow>) { return 0; }
at::Tensor DecodeGraphs::run(std::span<const DecodeRow>) { return run(model::PagedBatch{}); }
std::vector<TokenId> DecodeGraphs::run_argmax(std::span<const DecodeRow>) {
  (void)run(model::PagedBatch{});
  return {};
}

#endif

}  // namespace meshtrain::serve
