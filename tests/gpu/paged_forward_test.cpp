// The model's paged forward (model/paged_forward.h) on CUDA in bf16: the chunked, ragged, scrambled-block steps of
// the unit test (tests/unit/serve/paged_forward_test.cpp) against the plain full-sequence forward, both measured
// against the fp32 forward on the GPU. The paged logits may be no further from fp32 than bf16 rounding puts the
// plain bf16 forward (twice its error, plus a small floor), and fp32 paged must equal fp32 plain. The steps'
// single-token chunks lead their batches, so they go through the decode kernel (model/kernels/paged_decode.h); the
// chunks after them go through the reference and, given their index (model/paged_prefill_index.h), through flash's
// variable-length kernel (bf16; fp32 stays on the reference). All of it twice: with each layer's projections its
// own GEMM, then with q/k/v and gate/up fused (model/fused_projections.h: one GEMM per group, q and k rotated by one
// RoPE launch, SwiGLU on the strided halves), under the same bounds.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/kernels/paged_decode.h"
#include "meshtrain/model/paged_forward.h"
#include "support/gpu_test_main.h"
#include "support/paged_test_batch.h"
#include "support/tiny_model.h"

namespace meshtrain {
namespace {

class PagedForwardGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedForwardGpu, LogitsWithinBf16OfTheFullForward) {
  torch::NoGradGuard no_grad;
  const auto cfg = testing_support::tiny_model({.family = GetParam(), .vocab_size = 1000, .n_layer = 4,
                                                .n_head = 8, .n_kv_head = GetParam() == "llama" ? 2 : 8,
                                                .d_model = 512, .d_ff = 1024, .max_seq_len = 256});
  model::Transformer net32(cfg, at::TensorOptions().device(at::kCUDA));
  net32->init_weights(7);
  net32->eval();
  model::Transformer net16(cfg, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  net16->init_weights(7);
  net16->eval();
  const std::vector<int64_t> lengths = {130, 17, 200, 64};
  const std::vector<std::vector<int64_t>> cuts = {{64, 1, 65}, {17}, {1, 100, 98, 1}, {16, 16, 16, 16}};
  const int64_t hd = cfg.d_model / cfg.n_head;
  for (const auto dtype : {at::kBFloat16, at::kFloat}) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    EXPECT_TRUE(model::paged_decode_supported(at::empty({1, cfg.n_head, hd}, opts),
                                              at::empty({1, 16, cfg.n_kv_head, hd}, opts)))
        << "the decode kernel does not take this model's heads (" << hd << " wide) in " << dtype;
  }
  const std::vector<std::tuple<int64_t, bool, bool>> runs = {
      {16, false, false}, {12, false, false}, {16, true, false}, {12, true, false},
      {16, false, true},  {12, false, true},  {16, true, true},  {12, true, true}};
  for (const auto& [bs, varlen, fused] : runs) {
    if (fused) {  // the first fused run lays both models out; later calls find them laid out
      ASSERT_GT(model::fuse_projections(*net16), 0);
      ASSERT_GT(model::fuse_projections(*net32), 0);
    }
    SCOPED_TRACE(varlen ? "prefill chunks through flash's variable-length kernel" : "prefill chunks through the reference");
    SCOPED_TRACE(fused ? "fused projections" : "one GEMM per projection");
    const auto run16 = testing_support::run_paged_chunks(*net16, bs, lengths, cuts, 5, varlen);
    const auto run32 = testing_support::run_paged_chunks(*net32, bs, lengths, cuts, 5, varlen);
    EXPECT_EQ(run16.decodes, 3) << "steps 0, 1 and 3 each lead with one single-token chunk";
    for (size_t i = 0; i < lengths.size(); ++i) {
      const auto tokens = run16.tokens[i].view({1, -1}).cuda();
      const auto ref = net32->forward(tokens).squeeze(0).cpu();
      const auto plain16 = net16->forward(tokens).squeeze(0).to(at::kFloat).cpu();
      const double plain_err = (plain16 - ref).abs().max().item<double>();
      const double paged_err = (run16.logits[i] - ref).abs().max().item<double>();
      EXPECT_LE(paged_err, 2 * plain_err + 1e-3)
          << "block size " << bs << ", sequence " << i << ": bf16 plain forward off fp32 by " << plain_err;
      EXPECT_TRUE(at::allclose(run32.logits[i], ref, 1e-4, 1e-4))
          << "fp32, block size " << bs << ", sequence " << i << ": largest difference "
          << (run32.logits[i] - ref).abs().max().item<double>();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PagedForwardGpu, ::testing::Values("llama", "gpt2"));

}  // namespace
}  // namespace meshtrain

int main(int argc, char** argv) { return meshtrain::testing_support::run_gpu_tests(argc, argv); }
