// FP8 weights for inference on the CPU (model/linear/fp8_weight.h, model/fp8_weights.h): each row scaled onto e4m3's
// largest value and rounded within e4m3's precision; the product within the bound that rounding allows of the
// exact one; a model's block layers held in FP8 side by side (their old weights out of the parameters), the head
// and embeddings left alone.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/model/block.h"
#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/linear/fp8_weight.h"
#include "support/tiny_model.h"

namespace meshtrain::model {
namespace {

// e4m3 keeps 3 mantissa bits: a normal value rounds within 2⁻⁴ of itself; below 2⁻⁶ (scaled) the spacing is 2⁻⁹.
TEST(Fp8Weight, EachRowLandsOnE4m3sLargestAndRoundsWithinItsPrecision) {
  at::manual_seed(3);
  auto w = at::randn({48, 64}) * 0.05;
  w[1].zero_();            // a zero row: zero codes, no NaN
  w[2].mul_(1000);         // an outlier row keeps the others' precision
  const Fp8Weight q = quantize_fp8_weight(w);
  ASSERT_EQ(q.q.scalar_type(), at::kFloat8_e4m3fn);
  ASSERT_EQ(q.scale.sizes(), (std::vector<int64_t>{48, 1}));
  const auto codes = q.q.to(at::kFloat);
  EXPECT_TRUE(codes.isfinite().all().item<bool>());
  EXPECT_EQ(codes[1].abs().max().item<float>(), 0.0f);
  for (int64_t r : {0, 2, 47}) EXPECT_EQ(codes[r].abs().max().item<float>(), 448.0f) << "row " << r;
  const auto back = q.dequantize(at::kFloat);
  const auto bound = w.abs() * 0.0625 + q.scale * 0.001953125;  // 2⁻⁴ relative, half a subnormal step absolute
  EXPECT_TRUE(((back - w).abs() <= bound).all().item<bool>()) << "largest error " << (back - w).abs().max();
  EXPECT_THROW(quantize_fp8_weight(at::randn({16, 20})), Error) << "in (20) not a multiple of 16";
}

// Each product term carries at most 2⁻⁴ of x's rounding and 2⁻⁴ of w's: |y − x·wᵀ| ≤ (2·2⁻⁴ + 2⁻⁸)·(|x|·|w|ᵀ).
TEST(Fp8Weight, LinearIsTheExactProductWithinTheRoundingOfItsOperands) {
  at::manual_seed(4);
  const auto w = at::randn({32, 80}) * 0.1, bias = at::randn({32});
  const auto x = at::randn({2, 5, 80});
  const Fp8Weight q = quantize_fp8_weight(w);
  const auto y = fp8_weight_linear(x, q, bias);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, 32}));
  const auto exact = at::linear(x, w, bias);
  const auto bound = at::linear(x.abs(), w.abs()) * 0.129 + 1e-5;
  EXPECT_TRUE(((y - exact).abs() <= bound).all().item<bool>()) << "largest error " << (y - exact).abs().max();
  EXPECT_GT((y - exact).abs().max().item<double>(), 1e-4) << "a product of FP8 operands, not the exact one";
  EXPECT_EQ(fp8_weight_linear(at::randn({0, 80}), q, bias).sizes(), (std::vector<int64_t>{0, 32}));
}

TEST(Fp8Weights, BlockLayersHeldSideBySideWithoutTheirOldWeights) {
  torch::NoGradGuard no_grad;
  Transformer net(testing_support::tiny_model({.family = "llama", .vocab_size = 64, .n_head = 4, .n_kv_head = 2,
                                               .d_ff = 64}));
  net->init_weights(1);
  const auto head_before = net->head_weight().clone();
  int64_t block_weights = 0;
  for (const auto& p : net->named_parameters())
    if (p.key().find("blocks.") == 0 && p.key().find("norm") == std::string::npos) block_weights += 1;
  EXPECT_EQ(fp8_weights_refusal(*net), "");
  const Fp8WeightsSummary s = hold_weights_in_fp8(*net);
  EXPECT_EQ(s.layers, 2 * 7);
  EXPECT_EQ(s.layers, block_weights);
  // fp32 weights (4 bytes) become 1-byte codes and a 4-byte scale per row.
  EXPECT_LT(s.bytes_after * 3, s.bytes_before);
  for (const auto& p : net->named_parameters())
    EXPECT_FALSE(p.key().find("blocks.") == 0 && p.key().find("norm") == std::string::npos)
        << p.key() << " is still a parameter";
  auto& block = *net->blocks->ptr<BlockImpl>(0);
  EXPECT_TRUE(block.attn->wq->weight.is_meta());
  EXPECT_EQ(block.attn->wq->weight.sizes(), (std::vector<int64_t>{32, 32})) << "the shape still answers";
  EXPECT_TRUE(side_by_side({block.attn->wq.get(), block.attn->wk.get(), block.attn->wv.get()}).fp8.defined());
  EXPECT_TRUE(side_by_side({block.mlp->gate.get(), block.mlp->up.get()}).fp8.defined());
  EXPECT_TRUE(at::equal(net->head_weight(), head_before)) << "the head stays as it was";
  EXPECT_EQ(hold_weights_in_fp8(*net).layers, 0) << "a second call finds nothing left to hold";
  EXPECT_NE(fp8_weights_refusal(*net), "");
  EXPECT_THROW(block.attn->wo->hold_weight_as_fp8(quantize_fp8_weight(at::randn({32, 32}))), Error);
}

}  // namespace
}  // namespace meshtrain::model
