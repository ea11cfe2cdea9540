// The decode-attention kernel (model/kernels/paged_decode.h) against the reference paged attention
// (model/paged_attention.h with no decodes declared: gather + SDPA per sequence), run on the GPU in fp32 on the
// same values. Sequences of 1, 7, 16, 17, 300 and 4000 tokens in one batch over scrambled blocks, block-table
// rows wider than needed (up to a decode graph's 8192 positions), GQA ratios 1/4/8, head dims 64 and 128, block
// sizes 16 and 12; the long batch runs split over the context, the short one in a single split, and one context
// cut so that its last run is empty. Also: a zero-length (padding) row, the kernel
// as paged_attention takes it for a batch's leading decodes, and a CUDA graph captured once and replayed
// with new lengths and blocks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#if MESHTRAIN_CUDA_KERNELS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "meshtrain/model/kernels/paged_decode.h"
#include "meshtrain/model/paged_attention.h"
#include "support/gpu_test_main.h"

namespace meshtrain {
namespace {

// One batch of decodes over a random cache: q [B, H, hd] (a view with a row stride wider than H · hd), the
// cache's keys and values, block tables [B, max_blocks] int32 (padding entries 0) and context lengths [B] int32.
struct DecodeBatch {
  at::Tensor q, k, v, tables, lens;
  std::vector<int64_t> context;
  int64_t block_size = 0;
};

// Sequences of `context` tokens over blocks handed out in a random order from a cache with spare blocks (at
// least `min_blocks` in all), each table row `extra_blocks` wider than the longest sequence needs.
DecodeBatch make_decode_batch(at::ScalarType dtype, const std::vector<int64_t>& context, int64_t Hkv, int64_t group,
                              int64_t hd, int64_t bs, int64_t extra_blocks, uint64_t seed, int64_t min_blocks = 0) {
  at::manual_seed(seed);
  DecodeBatch d;
  d.context = context;
  d.block_size = bs;
  const auto B = static_cast<int64_t>(context.size());
  int64_t used = 0, widest = 0;
  for (int64_t n : context) {
    used += (n + bs - 1) / bs;
    widest = std::max(widest, (n + bs - 1) / bs);
  }
  const int64_t num_blocks = std::max(used + 7, min_blocks), max_blocks = widest + extra_blocks;
  const auto order = at::randperm(num_blocks, at::kLong);
  const int64_t* shuffled = order.const_data_ptr<int64_t>();
  std::vector<int32_t> tables(static_cast<size_t>(B * max_blocks), 0), lens;
  int64_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < (context[static_cast<size_t>(b)] + bs - 1) / bs; ++i)
      tables[static_cast<size_t>(b * max_blocks + i)] = static_cast<int32_t>(shuffled[next++]);
    lens.push_back(static_cast<int32_t>(context[static_cast<size_t>(b)]));
  }
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
  d.k = at::randn({num_blocks, bs, Hkv, hd}, opts);
  d.v = at::randn({num_blocks, bs, Hkv, hd}, opts);
  d.q = at::randn({B, Hkv * group + 1, hd}, opts).narrow(1, 1, Hkv * group);
  d.tables = at::tensor(tables, at::kInt).view({B, max_blocks}).to(at::kCUDA);
  d.lens = at::tensor(lens, at::kInt).to(at::kCUDA);
  return d;
}

// The reference in fp32: every row a one-token chunk through the gather + SDPA loop (no decodes declared).
at::Tensor reference_decode(const DecodeBatch& d) {
  model::PagedBatch batch;
  batch.block_tables = d.tables;
  for (size_t b = 0; b < d.context.size(); ++b) batch.chunks.push_back({static_cast<int64_t>(b), 1, d.context[b]});
  const model::PagedLayerCache cache{d.k.to(at::kFloat), d.v.to(at::kFloat)};
  return model::paged_attention(d.q.to(at::kFloat), cache, batch);
}

// Largest |got − want| per row, printed with each row's context length so that a failure shows which length is off.
double decode_error(const at::Tensor& got, const at::Tensor& want, const std::vector<int64_t>& context,
                    const std::string& what) {
  const auto err = (got.to(at::kFloat) - want).abs().amax({1, 2}).cpu();
  double worst = 0;
  std::string rows;
  for (int64_t b = 0; b < err.size(0); ++b) {
    const double e = err[b].item<double>();
    worst = std::max(worst, e);
    rows += " " + std::to_string(context[static_cast<size_t>(b)]) + ":" + std::to_string(e);
  }
  std::printf("%s: max error %.3g (context:error%s), |ref| max %.3g\n", what.c_str(), worst, rows.c_str(),
              want.abs().max().item<double>());
  return worst;
}

struct DecodeCase {
  at::ScalarType dtype;
  int64_t group, hd, block_size;
};

std::string decode_case_name(const ::testing::TestParamInfo<DecodeCase>& info) {
  const DecodeCase& c = info.param;
  return std::string(c.dtype == at::kFloat ? "fp32" : c.dtype == at::kHalf ? "fp16" : "bf16") + "_gqa" +
         std::to_string(c.group) + "_hd" + std::to_string(c.hd) + "_bs" + std::to_string(c.block_size);
}

double decode_tolerance(at::ScalarType dtype) { return dtype == at::kFloat ? 1e-4 : 2e-2; }

class PagedDecodeGpu : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(PagedDecodeGpu, MatchesTheReference) {
  torch::NoGradGuard no_grad;
  const DecodeCase& c = GetParam();
  const auto opts = at::TensorOptions(at::kCUDA).dtype(c.dtype);
  ASSERT_TRUE(model::paged_decode_supported(at::empty({1, 2 * c.group, c.hd}, opts),
                                            at::empty({1, c.block_size, 2, c.hd}, opts)));
  // Long: 4000 tokens in 6 rows over 2 KV heads plans many splits, and each row cuts its own context into as
  // many runs as it fills (1 token: one run; 4000: all of them). Short: no row past 17 tokens, table rows of at
  // most 5 blocks: a single split. Wide: a decode graph's table (8192 positions) under short contexts, each
  // row cutting its few runs out of many planned. Uneven: one row of 2072 tokens cut into 64 runs of 33, the
  // last of which starts past the context (an empty run, its neutral partial combined).
  struct Batch {
    std::string label;
    std::vector<int64_t> context;
    int64_t table_tokens;  // the table rows' width in positions, at least the longest row's blocks + 3
  };
  const std::vector<Batch> batches = {{"long", {300, 1, 4000, 17, 7, 16}, 0},
                                      {"short", {7, 17, 1, 16}, 0},
                                      {"wide", {130, 255, 1, 64, 200, 33, 96, 129}, 8192},
                                      {"uneven", {2072}, 4096}};
  for (const auto& [label, context, table_tokens] : batches) {
    const int64_t widest = (*std::max_element(context.begin(), context.end()) + c.block_size - 1) / c.block_size;
    const int64_t extra = std::max<int64_t>(3, (table_tokens + c.block_size - 1) / c.block_size - widest);
    const auto d = make_decode_batch(c.dtype, context, 2, c.group, c.hd, c.block_size, extra, 11);
    const auto got = model::paged_decode_attention(d.q, d.k, d.v, d.tables, d.lens);
    ASSERT_EQ(got.sizes(), d.q.sizes());
    ASSERT_EQ(got.scalar_type(), c.dtype);
    const auto want = reference_decode(d);
    EXPECT_LE(decode_error(got, want, d.context, decode_case_name({c, 0}) + " " + label), decode_tolerance(c.dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedDecodeGpu,
    ::testing::Values(DecodeCase{at::kFloat, 1, 64, 16}, DecodeCase{at::kFloat, 4, 64, 12},
                      DecodeCase{at::kFloat, 8, 64, 16}, DecodeCase{at::kFloat, 1, 128, 12},
                      DecodeCase{at::kFloat, 4, 128, 16}, DecodeCase{at::kFloat, 8, 128, 12},
                      DecodeCase{at::kBFloat16, 1, 64, 12}, DecodeCase{at::kBFloat16, 4, 64, 16},
                      DecodeCase{at::kBFloat16, 8, 64, 12}, DecodeCase{at::kBFloat16, 1, 128, 16},
                      DecodeCase{at::kBFloat16, 4, 128, 12}, DecodeCase{at::kBFloat16, 8, 128, 16},
                      DecodeCase{at::kBFloat16, 4, 128, 16}, DecodeCase{at::kBFloat16, 8, 64, 16},
                      // Groups that are no power of two, or wider than one CTA's 8 heads; fp16.
                      DecodeCase{at::kBFloat16, 3, 128, 16}, DecodeCase{at::kBFloat16, 12, 64, 12},
                      DecodeCase{at::kHalf, 4, 128, 16}, DecodeCase{at::kHalf, 1, 64, 12},
                      // Blocks of a single token and of an odd size.
                      DecodeCase{at::kFloat, 4, 128, 1}, DecodeCase{at::kBFloat16, 4, 64, 5}),
    decode_case_name);

// A padding row (context 0) gets zeros and leaves the other rows as they were, in one split and in several.
TEST(PagedDecodeGpuRows, ZeroLengthRowIsZero) {
  torch::NoGradGuard no_grad;
  for (const int64_t extra : {0, 300}) {  // table rows of 7 blocks (112 tokens): one split; of 307: several
    auto d = make_decode_batch(at::kFloat, {5, 9, 100}, 2, 4, 128, 16, extra, 3);
    const auto want = reference_decode(d);
    d.lens[0].fill_(0);
    const auto got = model::paged_decode_attention(d.q, d.k, d.v, d.tables, d.lens);
    EXPECT_EQ(got[0].abs().max().item<float>(), 0.f) << "table rows " << d.tables.size(1) << " wide";
    EXPECT_LE(decode_error(got.narrow(0, 1, 2), want.narrow(0, 1, 2), {9, 100}, "rows after a padding row"), 1e-4);
  }
}

// paged_attention sends a batch's leading decodes through the kernel (int32 or int64 block tables and lengths)
// and the prefill chunk after them through the reference; the result equals the reference for every row.
TEST(PagedDecodeGpuRows, PagedAttentionTakesTheLeadingDecodes) {
  torch::NoGradGuard no_grad;
  // Rows 0-2: decodes of sequences 0-2; rows 3-8: a 6-token chunk of sequence 3 at positions [44, 50).
  const auto d = make_decode_batch(at::kBFloat16, {33, 1, 700, 50}, 2, 4, 64, 16, 2, 5);
  const auto q = at::cat({d.q.narrow(0, 0, 3), at::randn({6, 8, 64}, d.q.options())}, 0);
  model::PagedBatch batch;
  batch.block_tables = d.tables;
  batch.context_lens = d.lens;
  batch.chunks = {{0, 1, 33}, {1, 1, 1}, {2, 1, 700}, {3, 6, 50}};
  const model::PagedLayerCache cache{d.k, d.v};
  const model::PagedLayerCache cache32{d.k.to(at::kFloat), d.v.to(at::kFloat)};
  const auto want = model::paged_attention(q.to(at::kFloat), cache32, batch);  // num_decodes 0: the reference
  for (const bool int64 : {false, true}) {
    batch.num_decodes = 3;
    batch.block_tables = int64 ? d.tables.to(at::kLong) : d.tables;
    batch.context_lens = int64 ? d.lens.to(at::kLong) : d.lens;
    const auto got = model::paged_attention(q, cache, batch);
    const double err = (got.to(at::kFloat) - want).abs().max().item<double>();
    EXPECT_LE(err, 2e-2) << (int64 ? "int64" : "int32") << " tables and lengths";
    // The decode rows are the kernel's own output.
    const auto direct = model::paged_decode_attention(q.narrow(0, 0, 3), d.k, d.v, d.tables.narrow(0, 0, 3),
                                                      d.lens.narrow(0, 0, 3));
    EXPECT_TRUE(at::equal(got.narrow(0, 0, 3), direct));
  }
  // All rows decodes: the host-side chunk list is not read (here: left empty).
  batch.chunks.clear();
  batch.num_decodes = 3;
  batch.block_tables = d.tables.narrow(0, 0, 3);
  batch.context_lens = d.lens;
  const auto only = model::paged_attention(q.narrow(0, 0, 3), cache, batch);
  EXPECT_LE((only.to(at::kFloat) - want.narrow(0, 0, 3)).abs().max().item<double>(), 2e-2);
}

#if MESHTRAIN_CUDA_KERNELS
// Captured once in a CUDA graph, then replayed after new lengths and block ids are written into the same
// tensors: the output follows the new values (the work split depends on shapes only, and nothing syncs).
TEST(PagedDecodeGpuRows, CapturedGraphFollowsNewLengths) {
  torch::NoGradGuard no_grad;
  const auto first = make_decode_batch(at::kBFloat16, {300, 1, 4000, 17}, 2, 4, 128, 16, 3, 7, 400);
  // Same cache shape and table width (4000 tokens need 250 blocks either way), other lengths and blocks.
  const auto second = make_decode_batch(at::kBFloat16, {4000, 64, 2, 999}, 2, 4, 128, 16, 3, 8, 400);
  ASSERT_EQ(first.tables.sizes(), second.tables.sizes());
  auto tables = first.tables.clone(), lens = first.lens.clone();
  auto q = first.q.clone(), k = first.k.clone(), v = first.v.clone();
  c10::cuda::getCurrentCUDAStream().synchronize();  // the inputs, written on this stream, before the side stream reads
  auto stream = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  at::Tensor out;
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    (void)model::paged_decode_attention(q, k, v, tables, lens);  // warm-up outside the capture
    stream.synchronize();
    graph.capture_begin();
    out = model::paged_decode_attention(q, k, v, tables, lens);
    graph.capture_end();
  }
  graph.replay();
  c10::cuda::getCurrentCUDAStream().synchronize();
  EXPECT_LE(decode_error(out, reference_decode(first), first.context, "graph, first values"), 2e-2);
  ASSERT_EQ(second.k.sizes(), k.sizes());
  tables.copy_(second.tables);
  lens.copy_(second.lens);
  q.copy_(second.q);
  k.copy_(second.k);
  v.copy_(second.v);
  graph.replay();
  c10::cuda::getCurrentCUDAStream().synchronize();
  EXPECT_LE(decode_error(out, reference_decode(second), second.context, "graph, replayed with new values"), 2e-2);
}
#endif

}  // namespace
}  // namespace meshtrain

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return meshtrain::testing_support::kCudaKernels ? std::string() : std::string("built without the CUDA kernels");
  });
}
