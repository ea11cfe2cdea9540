// The decode step's GEMMs with their weights read from HBM, as a decode step reads them: y[M, N] = x[M, K] · W[N, K]ᵀ
// in bf16 at the projection shapes of Llama 3.2 1B and Llama 3.1 8B (q/k/v and gate/up as one GEMM each, as the
// serving engine lays them side by side; o, down and the head), M = 1, 8 and 64 rows. A GEMM timed again and again
// on one weight of 8-13 MB reads it from the 50 MB L2 after the first call, which no decode step does: each shape
// keeps copies of W that together pass 200 MB, and one CUDA graph runs the GEMM over every copy in turn, replayed
// between CUDA events (the median of 20 replays after 3 warm-up ones, per GEMM: tests/support/cuda_graph_timing.h). Three ways to run it:
//   aten        at::mm (cuBLAS, what the engine runs today)
//   lt          cuBLASLt with its heuristic's first kernel (model/kernels/lt_matmul.h)
//   lt-tuned    cuBLASLt with set_tuning: the fastest of the heuristic's first answers, timed once on a warm weight
//   aten-L2     at::mm on one copy again and again: W read from the L2 where it fits (≤ ~40 MB), the ceiling that a
//               prefetch of the weight into the L2 ahead of its GEMM could reach
// and the rate each reaches: W's bytes (plus x's and y's) over its time. Prints a table; writes JSON to argv[1]
// (default decode_gemm_bench.json). Exit code 77 without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if MESHTRAIN_CUDA_KERNELS
#include "support/cuda_graph_timing.h"
#endif

#include "meshtrain/model/kernels/lt_matmul.h"

using namespace meshtrain;

namespace {

struct Shape {
  const char* model;
  const char* name;
  int64_t n, k;
};

// N × K of each projection, the fused ones as the engine fuses them (model/fused_projections.h).
const Shape kShapes[] = {
    {"llama3.2-1b", "qkv", 2048 + 2 * 512, 2048},   {"llama3.2-1b", "o", 2048, 2048},
    {"llama3.2-1b", "gate_up", 2 * 8192, 2048},     {"llama3.2-1b", "down", 2048, 8192},
    {"llama3.2-1b", "head", 128256, 2048},          {"llama3.1-8b", "qkv", 4096 + 2 * 1024, 4096},
    {"llama3.1-8b", "o", 4096, 4096},               {"llama3.1-8b", "gate_up", 2 * 14336, 4096},
    {"llama3.1-8b", "down", 4096, 14336},           {"llama3.1-8b", "head", 128256, 4096},
};
constexpr const char* kWays[] = {"aten", "lt", "lt-tuned", "aten-L2"};
constexpr int kNumWays = 4;

struct Row {
  Shape shape;
  int64_t m = 0;
  double us[kNumWays] = {0, 0, 0, 0};  // per way, -1 where cuBLASLt had no kernel
  double bytes = 0;
};

#if MESHTRAIN_CUDA_KERNELS
// Per GEMM, the copies run in turn inside one graph (testing_support::graph_call_us); -1 where a call says it cannot
// run (tried once first, which also does cuBLASLt's search and tuning outside the capture).
double cold_us(int copies, const std::function<bool(int)>& gemm) {
  for (int i = 0; i < copies; ++i)
    if (!gemm(i)) return -1;
  return testing_support::graph_call_us([&](int i) { gemm(i); }, copies);
}

Row bench(const Shape& s, int64_t m) {
  const auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const double w_bytes = 2.0 * static_cast<double>(s.n * s.k);
  const int copies = std::max(2, static_cast<int>(200e6 / w_bytes) + 1);
  std::vector<at::Tensor> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(at::randn({s.n, s.k}, bf16) * 0.02);
  const auto x = at::randn({m, s.k}, bf16);
  auto y = at::empty({m, s.n}, bf16);
  Row row{s, m};
  row.bytes = w_bytes + 2.0 * static_cast<double>(m * (s.k + s.n));
  row.us[0] = cold_us(copies, [&](int i) {
    at::mm_out(y, x, ws[i].t());
    return true;
  });
  for (const bool tuned : {false, true}) {
    model::lt::set_tuning(tuned);
    row.us[tuned ? 2 : 1] = cold_us(copies, [&](int i) {
      return model::lt::run({.a = x, .b = ws[i], .trans_b = true, .out = y});
    });
  }
  model::lt::set_tuning(false);
  row.us[3] = testing_support::graph_call_us([&](int) { at::mm_out(y, x, ws[0].t()); }, copies);
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
  at::NoGradGuard no_grad;
  const std::string json_path = argc > 1 ? argv[1] : "decode_gemm_bench.json";
  std::vector<Row> rows;
  for (const Shape& s : kShapes)
    for (const int64_t m : {1, 8, 64}) rows.push_back(bench(s, m));
  std::printf("decode GEMMs, bf16, weights read from HBM (copies past the L2, one graph): us a GEMM and GB/s\n");
  std::printf("%-12s %-8s %4s %9s %9s %9s %9s %9s %9s %9s %9s\n", "model", "gemm", "M", "aten us", "lt us",
              "tuned us", "L2 us", "aten GB/s", "lt GB/s", "tuned", "L2");
  std::ofstream js(json_path);
  js << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const auto rate = [&](double us) { return us > 0 ? r.bytes / (us * 1e-6) / 1e9 : 0.0; };
    std::printf("%-12s %-8s %4lld %9.2f %9.2f %9.2f %9.2f %9.0f %9.0f %9.0f %9.0f\n", r.shape.model, r.shape.name,
                static_cast<long long>(r.m), r.us[0], r.us[1], r.us[2], r.us[3], rate(r.us[0]), rate(r.us[1]),
                rate(r.us[2]), rate(r.us[3]));
    js << "  {\"model\": \"" << r.shape.model << "\", \"gemm\": \"" << r.shape.name << "\", \"n\": " << r.shape.n
       << ", \"k\": " << r.shape.k << ", \"m\": " << r.m << ", \"bytes\": " << r.bytes;
    for (int w = 0; w < kNumWays; ++w) js << ", \"" << kWays[w] << "_us\": " << r.us[w];
    js << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  js << "]\n";
  std::printf("JSON: %s\n", json_path.c_str());
  return 0;
#endif
}
