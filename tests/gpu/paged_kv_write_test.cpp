// The paged cache's write kernel (model/kernels/paged_kv_write.h) against index_copy_ of each tensor, on the GPU:
// keys and values as the paged forward passes them (strided views of one projection output, heads transposed),
// scattered slots, fp32, bf16 and fp16, head dims 64 and 128: the caches equal bit for bit, rows not written left
// as they were, a slot outside the cache not written; and what the kernel refuses (a CPU tensor, dtypes apart).
// The write with RoPE (Llama's step) against fused_rope and then the plain write.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>

#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/kernels/paged_kv_write.h"
#include "support/gpu_test_main.h"

namespace meshtrain {
namespace {

struct WriteCase {
  at::ScalarType dtype;
  int64_t hd;
};

class PagedKvWriteGpu : public ::testing::TestWithParam<WriteCase> {};

TEST_P(PagedKvWriteGpu, EqualsIndexCopy) {
  torch::NoGradGuard no_grad;
  const auto [dtype, hd] = GetParam();
  const int64_t N = 37, H = 8, Hkv = 2, rows = 160;
  at::manual_seed(5);
  const auto opts = at::TensorOptions(at::kCUDA).dtype(dtype);
  // One output row per token holding q's heads, then k's, then v's, as the fused projection gives them.
  const auto heads = at::randn({N, H + 2 * Hkv, hd}, opts);
  const auto k = heads.narrow(1, H, Hkv), v = heads.narrow(1, H + Hkv, Hkv);
  auto slots = at::randperm(rows, at::TensorOptions(at::kLong)).narrow(0, 0, N).to(at::kCUDA);
  const auto k_cache = at::randn({rows, Hkv, hd}, opts), v_cache = at::randn({rows, Hkv, hd}, opts);
  auto k_want = k_cache.clone(), v_want = v_cache.clone();
  k_want.index_copy_(0, slots, k.contiguous());
  v_want.index_copy_(0, slots, v.contiguous());
  auto k_got = k_cache.clone(), v_got = v_cache.clone();
  ASSERT_TRUE(model::paged_kv_write_supported(k_got, v_got, k, v, slots));
  model::paged_kv_write(k_got, v_got, k, v, slots);
  EXPECT_TRUE(at::equal(k_got, k_want));
  EXPECT_TRUE(at::equal(v_got, v_want));

  // A slot past the cache writes nothing (index_copy_ would stop the device); the other tokens are written.
  slots[0].fill_(rows + 3);
  auto k_rest = k_cache.clone(), v_rest = v_cache.clone();
  model::paged_kv_write(k_rest, v_rest, k, v, slots);
  const auto kept = slots.narrow(0, 1, N - 1);
  k_want = k_cache.clone();
  k_want.index_copy_(0, kept, k.narrow(0, 1, N - 1).contiguous());
  EXPECT_TRUE(at::equal(k_rest, k_want));
  EXPECT_TRUE(at::equal(v_rest.index_select(0, kept), v.narrow(0, 1, N - 1)));
}

INSTANTIATE_TEST_SUITE_P(Types, PagedKvWriteGpu,
                         ::testing::Values(WriteCase{at::kFloat, 64}, WriteCase{at::kFloat, 128},
                                           WriteCase{at::kBFloat16, 64}, WriteCase{at::kBFloat16, 128},
                                           WriteCase{at::kHalf, 128}),
                         [](const ::testing::TestParamInfo<WriteCase>& info) {
                           const auto& c = info.param;
                           return std::string(c.dtype == at::kFloat ? "fp32" : c.dtype == at::kHalf ? "fp16" : "bf16") +
                                  "_hd" + std::to_string(c.hd);
                         });

// The write with RoPE against fused_rope, then the plain write: q and the caches equal bit for bit (one rotation
// function in both kernels); a slot outside the cache writes no key or value, and its query is still rotated.
TEST_P(PagedKvWriteGpu, WithRopeEqualsFusedRopeThenTheWrite) {
  torch::NoGradGuard no_grad;
  const auto [dtype, hd] = GetParam();
  if (dtype == at::kHalf) GTEST_SKIP() << "RoPE's kernels take fp32 and bf16 (fused_rope.h)";
  const int64_t N = 37, H = 8, Hkv = 2, rows = 160;
  at::manual_seed(6);
  const auto opts = at::TensorOptions(at::kCUDA).dtype(dtype);
  const auto heads = at::randn({N, H + 2 * Hkv, hd}, opts);
  const auto q = heads.narrow(1, 0, H), k = heads.narrow(1, H, Hkv), v = heads.narrow(1, H + Hkv, Hkv);
  const auto f32 = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
  const auto cos = at::rand({N, hd}, f32), sin = at::rand({N, hd}, f32);
  auto slots = at::randperm(rows, at::TensorOptions(at::kLong)).narrow(0, 0, N).to(at::kCUDA);
  slots[3].fill_(-1);  // a padding row
  const auto k_cache = at::randn({rows, Hkv, hd}, opts), v_cache = at::randn({rows, Hkv, hd}, opts);

  // [1, H + H_kv, N, hd] as the paged forward rotates q and k without this kernel, then [N, H + H_kv, hd].
  const auto qk = model::fused_rope(heads.narrow(1, 0, H + Hkv).transpose(0, 1).unsqueeze(0), cos, sin)
                      .squeeze(0)
                      .transpose(0, 1);
  const auto live = at::cat({at::arange(0, 3), at::arange(4, N)}).to(at::kCUDA);
  auto k_want = k_cache.clone(), v_want = v_cache.clone();
  k_want.index_copy_(0, slots.index_select(0, live), qk.narrow(1, H, Hkv).index_select(0, live));
  v_want.index_copy_(0, slots.index_select(0, live), v.index_select(0, live));

  auto k_got = k_cache.clone(), v_got = v_cache.clone();
  ASSERT_TRUE(model::paged_rope_kv_write_supported(k_got, v_got, q, k, v, cos, sin, slots));
  const auto q_got = model::paged_rope_kv_write(k_got, v_got, q, k, v, cos, sin, slots);
  EXPECT_TRUE(q_got.is_contiguous());
  EXPECT_TRUE(at::equal(q_got, qk.narrow(1, 0, H))) << (q_got - qk.narrow(1, 0, H)).abs().max().item<float>();
  EXPECT_TRUE(at::equal(k_got, k_want)) << (k_got - k_want).abs().max().item<float>();
  EXPECT_TRUE(at::equal(v_got, v_want));

  // What it refuses: tables of another length or dtype, queries of another dtype.
  EXPECT_FALSE(model::paged_rope_kv_write_supported(k_got, v_got, q, k, v, cos.narrow(0, 0, N - 1), sin, slots));
  EXPECT_FALSE(model::paged_rope_kv_write_supported(k_got, v_got, q, k, v, cos.to(at::kDouble), sin, slots));
  EXPECT_FALSE(model::paged_rope_kv_write_supported(k_got, v_got, q.to(at::kHalf), k, v, cos, sin, slots));
}

TEST(PagedKvWriteGpuRefuses, CpuTensorsAndMixedTypes) {
  const auto cuda = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const auto rows = at::zeros({8, 2, 64}, cuda), kv = at::zeros({3, 2, 64}, cuda);
  const auto slots = at::arange(3, at::TensorOptions(at::kCUDA).dtype(at::kLong));
  EXPECT_TRUE(model::paged_kv_write_supported(rows, rows, kv, kv, slots));
  EXPECT_FALSE(model::paged_kv_write_supported(rows.cpu(), rows.cpu(), kv.cpu(), kv.cpu(), slots.cpu()));
  EXPECT_FALSE(model::paged_kv_write_supported(rows, rows, kv.to(at::kFloat), kv, slots));
  EXPECT_FALSE(model::paged_kv_write_supported(rows, rows, kv, kv, slots.to(at::kInt)));
}

}  // namespace
}  // namespace meshtrain

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return meshtrain::testing_support::kCudaKernels ? std::string() : std::string("built without the CUDA kernels");
  });
}
