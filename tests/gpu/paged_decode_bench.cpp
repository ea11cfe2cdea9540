// The decode-attention kernel (model/kernels/paged_decode.h) against the reference paged attention it replaces
// for decodes (gather + SDPA per sequence), one layer of Llama 3.1 8B's attention (32 query heads, 8 KV heads,
// head dim 128, bf16, blocks of 16 tokens scrambled over the cache), batch 1, 8 and 64 at contexts of 128, 1024
// and 4096 tokens. The kernel runs twice: with table rows as wide as the context, and with the rows a decode
// graph holds (kGraphTableTokens positions wide, the model's context, whatever the lengths), which is how the
// serving engine calls it. The kernel is timed as the engine runs it, inside a CUDA graph: 10 calls captured
// once, the graph replayed between CUDA events, the median of 20 replays after 3 warm-up ones, per call (an
// eager call's host overhead would hide a short kernel); the reference, which is not capturable, as single
// eager calls, the median of 20 after 3 warm-up. The kernel's bandwidth is the keys and values it must read
// (B · context · H_kv · hd · 2 bytes, twice) over its time in the graph's table. Prints a table; writes JSON to
// argv[1] (default paged_decode_bench.json). Exit code 77 without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if MESHTRAIN_CUDA_KERNELS
#include "support/cuda_graph_timing.h"
#endif

#include "meshtrain/model/kernels/paged_decode.h"
#include "meshtrain/model/paged_attention.h"

using namespace meshtrain;

namespace {

constexpr int64_t kGraphTableTokens = 8192;  // the Llama presets' max_seq_len: a decode graph's table width

struct BenchRow {
  int64_t batch = 0, context = 0;
  double kernel_us = 0, graph_table_us = 0, reference_us = 0, kernel_gbs = 0;
};

#if MESHTRAIN_CUDA_KERNELS
using testing_support::median_event_us;

// Per call: `calls` calls captured in one CUDA graph, the median replay / calls.
double graph_us(const std::function<void()>& call, int calls = 10) {
  return testing_support::graph_call_us([&](int) { call(); }, calls);
}

BenchRow bench_decode(int64_t B, int64_t context) {
  const int64_t H = 32, Hkv = 8, hd = 128, bs = 16;
  const int64_t blocks_per_seq = (context + bs - 1) / bs, num_blocks = B * blocks_per_seq;
  const auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  auto k = at::randn({num_blocks, bs, Hkv, hd}, bf16), v = at::randn({num_blocks, bs, Hkv, hd}, bf16);
  auto q = at::randn({B, H, hd}, bf16);
  // Every sequence's blocks scattered over the cache, as a long-running server's are.
  const auto tables = at::randperm(num_blocks, at::kLong).to(at::kInt).view({B, blocks_per_seq}).to(at::kCUDA);
  const auto lens = at::full({B}, context, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  model::PagedBatch batch;  // the reference: one chunk per row, no decodes declared
  batch.block_tables = tables;
  for (int64_t b = 0; b < B; ++b) batch.chunks.push_back({b, 1, context});
  const model::PagedLayerCache cache{k, v};
  BenchRow row{B, context};
  const auto wide = at::constant_pad_nd(tables, {0, std::max<int64_t>(0, kGraphTableTokens / bs - blocks_per_seq)});
  row.kernel_us = graph_us([&] { (void)model::paged_decode_attention(q, k, v, tables, lens); });
  row.graph_table_us = graph_us([&] { (void)model::paged_decode_attention(q, k, v, wide, lens); });
  row.reference_us = median_event_us([&] { (void)model::paged_attention(q, cache, batch); });
  const double bytes = 2.0 * static_cast<double>(B * context * Hkv * hd) * 2.0;
  row.kernel_gbs = bytes / (row.graph_table_us * 1e-6) / 1e9;
  return row;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if !MESHTRAIN_CUDA_KERNELS
  (void)argc;
  (void)argv;
  std::puts("built without the CUDA kernels: nothing to measure");
  return 77;
#else
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    std::puts("no GPU visible: skipped");
    return 77;
  }
  torch::NoGradGuard no_grad;
  const std::string json_path = argc > 1 ? argv[1] : "paged_decode_bench.json";
  std::vector<BenchRow> rows;
  for (const int64_t B : {1, 8, 64})
    for (const int64_t context : {128, 1024, 4096}) rows.push_back(bench_decode(B, context));
  std::printf("paged decode attention, Llama 3.1 8B layer (H 32, H_kv 8, hd 128, bf16, blocks of 16)\n");
  std::printf("%6s %8s %12s %16s %14s %8s %12s\n", "batch", "context", "kernel us", "graph table us",
              "reference us", "speedup", "GB/s (graph)");
  std::ofstream js(json_path);
  js << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    std::printf("%6lld %8lld %12.1f %16.1f %14.1f %8.1f %12.0f\n", static_cast<long long>(r.batch),
                static_cast<long long>(r.context), r.kernel_us, r.graph_table_us, r.reference_us,
                r.reference_us / r.kernel_us, r.kernel_gbs);
    js << "  {\"batch\": " << r.batch << ", \"context\": " << r.context << ", \"kernel_us\": " << r.kernel_us
       << ", \"graph_table_us\": " << r.graph_table_us << ", \"reference_us\": " << r.reference_us
       << ", \"kernel_gbs\": " << r.kernel_gbs << "}"
       << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  js << "]\n";
  std::printf("JSON: %s\n", json_path.c_str());
  return 0;
#endif
}
