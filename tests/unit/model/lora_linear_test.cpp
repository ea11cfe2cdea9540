// LoraLinear: its maths against the formula, PEFT's initialisation, the merged weight, dropout only while
// training, and a LoRA model that starts equal to its base.
#include "meshtrain/model/linear/lora_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/config_schema.h"
#include "meshtrain/model/block.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using model::LoraLinearImpl;

namespace {

ModelConfig lora_model(int64_t rank, const std::string& targets = "q,k,v,o,gate,up,down") {
  ModelConfig m = testing_support::tiny_model({.family = "llama", .vocab_size = 50, .n_kv_head = 2});
  m.lora_rank = rank;
  m.lora_alpha = 8.0;
  m.lora_targets = split_field_list(targets);
  Config c;
  c.model = m;
  resolve(c, 1);
  return c.model;
}

// A LoraLinear with random W, A and a non-zero B, so the adapter's term is present.
std::shared_ptr<LoraLinearImpl> random_lora(double dropout) {
  auto lin = std::make_shared<LoraLinearImpl>(6, 5, /*bias=*/true, /*rank=*/3, /*alpha=*/6.0, dropout,
                                              at::TensorOptions());
  at::NoGradGuard no_grad;
  for (at::Tensor* t : {&lin->weight, &lin->bias, &lin->lora_A, &lin->lora_B}) t->normal_();
  return lin;
}

}  // namespace

TEST(LoraLinear, ForwardIsBasePlusScaledLowRankProduct) {
  auto lin = random_lora(0.0);
  const auto x = at::randn({2, 4, 6});
  const auto want = at::linear(x, lin->weight, lin->bias) +
                    2.0 * at::matmul(at::matmul(x, lin->lora_A.t()), lin->lora_B.t());  // alpha / r = 6 / 3
  EXPECT_DOUBLE_EQ(lin->scale(), 2.0);
  EXPECT_TRUE(at::allclose(lin->forward(x), want, 1e-5, 1e-6));
  // The merged weight gives the same output through a plain linear (what export writes).
  EXPECT_TRUE(at::allclose(at::linear(x, lin->merged_weight(), lin->bias), want, 1e-5, 1e-5));
}

TEST(LoraLinear, GradientsReachTheAdaptersAndNotAFrozenBase) {
  auto lin = random_lora(0.0);
  lin->weight.set_requires_grad(false);
  lin->bias.set_requires_grad(false);
  lin->forward(at::randn({3, 6})).sum().backward();
  EXPECT_FALSE(lin->weight.grad().defined());
  ASSERT_TRUE(lin->lora_A.grad().defined());
  ASSERT_TRUE(lin->lora_B.grad().defined());
  EXPECT_GT(lin->lora_A.grad().abs().sum().item<double>(), 0.0);
}

TEST(LoraLinear, DropoutOnlyWhileTraining) {
  auto lin = random_lora(0.5);
  const auto x = at::randn({8, 6});
  lin->eval();
  const auto a = lin->forward(x), b = lin->forward(x);
  EXPECT_TRUE(at::equal(a, b));
  lin->train();
  EXPECT_FALSE(at::allclose(lin->forward(x), a));  // half the adapter's inputs dropped (and the rest × 2)
}

TEST(LoraLinear, InitialisedAsPeftDoes) {
  const ModelConfig m = lora_model(4);
  model::Transformer net(m);
  net->init_weights(7);
  auto* q = dynamic_cast<LoraLinearImpl*>(net->blocks->ptr<model::BlockImpl>(0)->attn->wq.get());
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->lora_A.sizes(), (at::IntArrayRef{4, m.d_model}));
  EXPECT_EQ(q->lora_B.sizes(), (at::IntArrayRef{q->weight.size(0), 4}));
  EXPECT_TRUE(at::equal(q->lora_B, at::zeros_like(q->lora_B)));
  const double bound = 1.0 / std::sqrt(static_cast<double>(m.d_model));
  EXPECT_LE(q->lora_A.abs().max().item<double>(), bound);
  EXPECT_GT(q->lora_A.abs().max().item<double>(), 0.8 * bound);  // uniform over the whole range
}

TEST(LoraLinear, OnlyTheTargetsAreAdaptedAndTheModelStartsEqualToItsBase) {
  model::Transformer base(lora_model(0)), lora(lora_model(4, "q,v,down"));
  base->init_weights(3);
  lora->init_weights(3);
  int64_t adapters = 0;
  for (const auto& item : lora->named_parameters())
    if (model::is_lora_parameter(item.key())) ++adapters;
  EXPECT_EQ(adapters, 2 * 3 * lora->config().n_layer);
  EXPECT_NE(dynamic_cast<LoraLinearImpl*>(lora->blocks->ptr<model::BlockImpl>(0)->mlp->down.get()), nullptr);
  EXPECT_EQ(dynamic_cast<LoraLinearImpl*>(lora->blocks->ptr<model::BlockImpl>(0)->mlp->up.get()), nullptr);
  // The base's parameters have the same names and values; B = 0 leaves the output unchanged.
  const auto tokens = at::randint(50, {2, 8});
  EXPECT_TRUE(at::equal(base->forward(tokens), lora->forward(tokens)));
}

// A rank holding columns [offset, offset + n) of a split input drops exactly those columns of what one process
// drops from the whole input from the same generator state (the row-parallel adapters rely on it).
TEST(LoraLinear, DropoutOfAColumnBlockIsTheWholeInputsBlock) {
  const auto x = at::randn({2, 3, 8});
  at::Generator gen = at::globalContext().defaultGenerator(at::kCPU);  // a handle on the default one
  const auto state = gen.get_state();
  const auto whole = model::lora_dropout(x, 0.5, 8, 0);
  EXPECT_GT(whole.eq(0).sum().item<int64_t>(), 0);  // something was dropped...
  EXPECT_TRUE(at::allclose(whole.masked_select(whole.ne(0)), (x * 2.0).masked_select(whole.ne(0))));  // ...and kept ×2
  for (int64_t offset : {0, 4}) {
    gen.set_state(state);
    const auto block = model::lora_dropout(x.narrow(-1, offset, 4), 0.5, 8, offset);
    EXPECT_TRUE(at::equal(block, whole.narrow(-1, offset, 4))) << "offset " << offset;
  }
}
