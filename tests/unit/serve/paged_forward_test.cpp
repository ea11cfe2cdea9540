// The model's paged forward (model/paged_forward.h) against its plain full-sequence forward: the logits of every
// position must match whatever the chunking, the block size, the physical blocks and the batch's mix.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/model/paged_prefill_index.h"
#include "support/paged_test_batch.h"
#include "support/tiny_model.h"

namespace meshtrain::serve {
namespace {

using testing_support::PagedSeq;
using testing_support::paged_test_batch;

model::Transformer paged_forward_model(const std::string& family) {
  model::Transformer net(testing_support::tiny_model(
      {.family = family, .vocab_size = 67, .n_head = 4, .n_kv_head = family == "llama" ? 2 : 4, .d_ff = 64,
       .max_seq_len = 32}));
  net->init_weights(11);
  net->eval();
  return net;
}

// The prefill index lists each chunk's whole context through its own block-table row, skips the decodes, and
// counts queries and contexts from zero.
TEST(PagedPrefillIndex, ListsEachChunksContextThroughItsBlocks) {
  const std::vector<model::PagedChunk> chunks = {{0, 1, 9}, {1, 3, 5}, {4, 2, 2}};  // a decode, then two chunks
  const std::vector<int32_t> tables = {7, 2, 0, 4, 1, 0, 3, 0, 0};                // rows of 3 blocks of 4 slots
  const auto idx = model::paged_prefill_index(chunks, 1, tables, 3, 4);
  EXPECT_EQ(idx.context_slots, (std::vector<int64_t>{16, 17, 18, 19, 4, 12, 13}));
  EXPECT_EQ(idx.cu_queries, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(idx.cu_contexts, (std::vector<int32_t>{0, 5, 7}));
  EXPECT_EQ(idx.max_queries, 3);
  EXPECT_EQ(idx.max_context, 5);
  EXPECT_THROW(model::paged_prefill_index(std::vector<model::PagedChunk>{{0, 4, 13}}, 0, tables, 3, 4), Error)
      << "13 positions need 4 blocks of 4, the row has 3";
}

class PagedForward : public ::testing::TestWithParam<std::string> {};

// Three sequences (13, 7 and 20 tokens) computed in steps of chunks at several offsets — whole prompts, single
// tokens (decodes), chunks that start and end inside a block — in one ragged batch per step, over scrambled
// physical blocks, for block sizes that do and do not divide the lengths.
TEST_P(PagedForward, LogitsEqualTheFullForward) {
  torch::NoGradGuard no_grad;
  auto net = paged_forward_model(GetParam());
  const std::vector<int64_t> lengths = {13, 7, 20};
  const std::vector<std::vector<int64_t>> cuts = {{5, 1, 7}, {7}, {1, 8, 10, 1}};
  for (const int64_t bs : {1, 4, 5, 16}) {
    const auto run = testing_support::run_paged_chunks(*net, bs, lengths, cuts, 3);
    for (size_t i = 0; i < lengths.size(); ++i) {
      const auto want = net->forward(run.tokens[i].view({1, -1})).squeeze(0);  // [T, V]
      const auto diff = (run.logits[i] - want).abs().amax(-1);                 // per position
      EXPECT_TRUE(at::allclose(run.logits[i], want, 1e-5, 1e-5))
          << "block size " << bs << ", sequence " << i << ": largest difference per position " << diff;
    }
  }
}

// Only the rows asked for come back, in the order asked.
TEST_P(PagedForward, LogitsOnlyForTheSampleRows) {
  torch::NoGradGuard no_grad;
  auto net = paged_forward_model(GetParam());
  const std::vector<PagedSeq> seqs = {{{1, 2, 3, 4, 5, 6}, {2, 0}}, {{7, 8, 9}, {1}}};
  auto batch = paged_test_batch(seqs, {{0, 0, 6}, {1, 0, 3}}, 4);
  batch.sample_rows = at::tensor(std::vector<int64_t>{8, 5}, at::kLong);
  auto cache = model::make_paged_cache(*net, 3, 4);
  const auto logits = model::paged_logits(*net, batch, cache);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 67}));
  const auto a = net->forward(at::tensor(seqs[0].tokens, at::kLong).view({1, -1}))[0][5];
  const auto b = net->forward(at::tensor(seqs[1].tokens, at::kLong).view({1, -1}))[0][2];
  EXPECT_TRUE(at::allclose(logits[0], b, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(logits[1], a, 1e-5, 1e-5));
}

// A chunk past the model's positions is refused before anything runs.
TEST_P(PagedForward, ContextPastMaxSeqLenRefused) {
  auto net = paged_forward_model(GetParam());
  const std::vector<PagedSeq> seqs = {{std::vector<int64_t>(33, 1), {0, 1, 2, 3, 4, 5, 6, 7, 8}}};
  auto cache = model::make_paged_cache(*net, 9, 4);
  EXPECT_THROW(model::paged_logits(*net, paged_test_batch(seqs, {{0, 0, 33}}, 4), cache), Error);
}

// The paged forward with q/k/v (and gate/up) as one GEMM over the fused layout (model/fused_projections.h)
// against the same model's layers one GEMM each, over the same chunked steps. fp32 on the CPU: each output is
// the same dot product over the same inputs, but a GEMM of another width may block or vectorise its reduction
// differently, so the bound is a few fp32 roundings of the logits (1e-5), not bit equality; the greedy pick must
// not move.
TEST_P(PagedForward, FusedProjectionsGiveTheUnfusedLogits) {
  torch::NoGradGuard no_grad;
  auto net = paged_forward_model(GetParam());
  const std::vector<int64_t> lengths = {13, 7, 20};
  const std::vector<std::vector<int64_t>> cuts = {{5, 1, 7}, {7}, {1, 8, 10, 1}};
  const auto apart = testing_support::run_paged_chunks(*net, 4, lengths, cuts, 3);
  ASSERT_GT(model::fuse_projections(*net), 0) << "nothing was laid out side by side";
  const auto fused = testing_support::run_paged_chunks(*net, 4, lengths, cuts, 3);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const double diff = (fused.logits[i] - apart.logits[i]).abs().max().item<double>();
    std::printf("sequence %zu: fused against unfused, largest logit difference %.3g\n", i, diff);
    EXPECT_TRUE(at::allclose(fused.logits[i], apart.logits[i], 1e-5, 1e-5)) << "sequence " << i << ": " << diff;
    EXPECT_TRUE(at::equal(fused.logits[i].argmax(-1), apart.logits[i].argmax(-1))) << "sequence " << i;
  }
}

// The blocks' weights held in FP8 (model/fp8_weights.h), fp32 activations cast per row on the CPU: the logits stay
// near the full-precision model's (a few per cent of their spread: e4m3 keeps 3 mantissa bits), and quantizing a
// model whose projections are already fused gives the logits of quantizing it unfused (the scales are per row, so
// the codes are the same; only the GEMMs' widths differ).
TEST_P(PagedForward, Fp8WeightsStayNearTheFullModelFusedOrNot) {
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> lengths = {13, 7, 20};
  const std::vector<std::vector<int64_t>> cuts = {{5, 1, 7}, {7}, {1, 8, 10, 1}};
  auto net = paged_forward_model(GetParam());
  const auto full = testing_support::run_paged_chunks(*net, 4, lengths, cuts, 3);
  EXPECT_GT(model::hold_weights_in_fp8(*net).layers, 0);
  const auto fp8 = testing_support::run_paged_chunks(*net, 4, lengths, cuts, 3);
  auto fused_net = paged_forward_model(GetParam());
  ASSERT_GT(model::fuse_projections(*fused_net), 0);
  model::hold_weights_in_fp8(*fused_net);
  const auto fused = testing_support::run_paged_chunks(*fused_net, 4, lengths, cuts, 3);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const double spread = (full.logits[i].amax(-1) - full.logits[i].amin(-1)).mean().item<double>();
    const double diff = (fp8.logits[i] - full.logits[i]).abs().max().item<double>();
    std::printf("sequence %zu: FP8 against full precision, largest logit difference %.3g (%.2f %% of the spread)\n",
                i, diff, 100 * diff / spread);
    EXPECT_LT(diff, 0.05 * spread) << "sequence " << i;
    EXPECT_GT(diff, 0.0) << "sequence " << i << ": the FP8 path did not run";
    EXPECT_TRUE(at::allclose(fused.logits[i], fp8.logits[i], 1e-5, 1e-5)) << "sequence " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PagedForward, ::testing::Values("llama", "gpt2"));

}  // namespace
}  // namespace meshtrain::serve
