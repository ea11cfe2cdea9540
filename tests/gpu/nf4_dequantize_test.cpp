// The NF4 dequantize kernel (src/model/kernels/nf4_dequantize.cu) against the CPU path of Nf4Tensor::dequantize,
// bit for bit, in fp32, bf16 and fp16, on sizes with short last blocks (odd counts, not multiples of 64 or of
// 64 × 256), zeros and a spread of block scales; quantizing on the GPU gives the CPU's codes; and nf4_linear's
// forward and input gradient on the GPU equal at::linear over the dequantized weight under bf16 autocast.
// Exit code 77 (skipped) without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <string>

#include "meshtrain/model/linear/nf4_linear.h"
#include "meshtrain/model/nf4_tensor.h"
#include "support/gpu_test_main.h"

using meshtrain::model::Nf4Tensor;

namespace {

at::Tensor spread(int64_t n) {
  auto x = at::randn({n});
  const int64_t blocks = (n + 63) / 64;
  auto scales = at::exp(at::rand({blocks}) * 16 - 12).repeat_interleave(64).narrow(0, 0, n);
  x = x * scales;
  if (n > 200) x.narrow(0, 64, 128).zero_();
  return x;
}

}  // namespace

TEST(Nf4Dequantize, KernelEqualsTheCpuPathBitForBit) {
  at::manual_seed(0);
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{65}, int64_t{64 * 256 + 7}, int64_t{3 * 64 * 256 + 101},
                    int64_t{4096 * 1024}}) {
    const auto x = spread(n);
    const auto cpu = Nf4Tensor::quantize(x);
    const auto gpu = cpu.to(at::kCUDA);
    for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf})
      EXPECT_TRUE(at::equal(gpu.dequantize(dt).cpu(), cpu.dequantize(dt))) << n << " " << dt;
    // Quantized on the GPU (ATen's ops there): the same codes and scales.
    const auto on_gpu = Nf4Tensor::quantize(x.cuda());
    EXPECT_TRUE(at::equal(on_gpu.codes.cpu(), cpu.codes)) << n;
    EXPECT_TRUE(at::equal(on_gpu.absmax_codes.cpu(), cpu.absmax_codes)) << n;
    EXPECT_TRUE(at::equal(on_gpu.absmax_scales.cpu(), cpu.absmax_scales)) << n;
  }
}

TEST(Nf4Dequantize, LinearUnderAutocastEqualsTheDequantizedWeightsPath) {
  at::manual_seed(1);
  const auto q = Nf4Tensor::quantize(at::randn({256, 512}, at::kCUDA) * 0.02);
  const auto w = q.dequantize(at::kBFloat16);
  const auto x0 = at::randn({4, 16, 512}, at::kCUDA);
  const auto dy = at::randn({4, 16, 256}, at::kCUDA).to(at::kBFloat16);
  auto x1 = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
  at::Tensor y1, y2;
  {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    y1 = meshtrain::model::nf4_linear(x1, q, at::Tensor());
    y2 = at::linear(x2, w);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
  ASSERT_EQ(y1.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(y1, y2));
  y1.backward(dy);
  y2.backward(dy);
  EXPECT_TRUE(at::equal(x1.grad(), x2.grad()));
}

int main(int argc, char** argv) {
  return meshtrain::testing_support::run_gpu_tests(argc, argv, [] {
    return std::string(meshtrain::testing_support::kCudaKernels ? "" : "built without CUDA: no NF4 kernel to test");
  });
}
