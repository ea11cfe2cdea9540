// Fused projections (model/fused_projections.h): laying out q/k/v and gate/up side by side changes no parameter's
// name, shape or value and keeps one copy of the weights; side_by_side finds exactly the groups laid out; layers
// whose forward is more than x·Wᵀ + b (LoRA adapters, FP8 matmuls) stay apart.
#include "meshtrain/model/fused_projections.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <map>
#include <string>

#include "meshtrain/core/config_schema.h"
#include "meshtrain/model/block.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

model::Transformer fused_projections_model(const std::string& family, const std::string& lora_targets = "") {
  ModelConfig m = testing_support::tiny_model({.family = family, .vocab_size = 50, .n_layer = 3, .n_head = 4,
                                               .n_kv_head = family == "llama" ? 2 : 4});
  if (!lora_targets.empty()) {
    m.lora_rank = 2;
    m.lora_targets = split_field_list(lora_targets);
  }
  Config c;
  c.model = m;
  resolve(c, 1);
  model::Transformer net(c.model, at::TensorOptions());
  net->init_weights(5);
  net->eval();
  return net;
}

std::map<std::string, at::Tensor> parameter_copies(model::TransformerImpl& net) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : net.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

model::SideBySide qkv_of(model::TransformerImpl& net, size_t i) {
  auto& a = *net.blocks->ptr<model::BlockImpl>(i)->attn;
  return model::side_by_side({a.wq.get(), a.wk.get(), a.wv.get()});
}

model::SideBySide gate_up_of(model::TransformerImpl& net, size_t i) {
  auto& m = *net.blocks->ptr<model::BlockImpl>(i)->mlp;
  return model::side_by_side({m.gate.get(), m.up.get()});
}

class FusedProjections : public ::testing::TestWithParam<std::string> {};

// Every block's q/k/v (and llama's gate/up) found side by side after, none before; the parameters keep their
// names, shapes, values and requires_grad, and the fused weight is the layers' weights stacked.
TEST_P(FusedProjections, LaysOutEveryGroupWithoutChangingParameters) {
  auto net = fused_projections_model(GetParam());
  const bool llama = GetParam() == "llama";
  for (size_t i = 0; i < net->blocks->size(); ++i) EXPECT_FALSE(qkv_of(*net, i).weight.defined()) << "block " << i;
  const auto before = parameter_copies(*net);
  const int64_t groups = model::fuse_projections(*net);
  EXPECT_EQ(groups, static_cast<int64_t>(net->blocks->size()) * (llama ? 2 : 1));
  const auto after = net->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (const auto& p : after) {
    const auto it = before.find(p.key());
    ASSERT_NE(it, before.end()) << p.key();
    EXPECT_TRUE(at::equal(p.value(), it->second)) << p.key() << " changed value";
    EXPECT_TRUE(p.value().requires_grad()) << p.key();
  }
  for (size_t i = 0; i < net->blocks->size(); ++i) {
    auto& a = *net->blocks->ptr<model::BlockImpl>(i)->attn;
    const auto qkv = qkv_of(*net, i);
    ASSERT_TRUE(qkv.weight.defined()) << "block " << i;
    EXPECT_TRUE(at::equal(qkv.weight, at::cat({a.wq->weight, a.wk->weight, a.wv->weight})));
    EXPECT_EQ(qkv.bias.defined(), !llama) << "gpt2's projections carry biases, llama's none";
    if (!llama) {
      EXPECT_TRUE(at::equal(qkv.bias, at::cat({a.wq->bias, a.wk->bias, a.wv->bias})));
    }
    // One buffer: the modules' weights are views of it, not a second copy.
    EXPECT_TRUE(a.wv->weight.storage().is_alias_of(a.wq->weight.storage()));
    if (llama) {
      EXPECT_TRUE(gate_up_of(*net, i).weight.defined()) << "block " << i;
    } else {
      EXPECT_FALSE(net->blocks->ptr<model::BlockImpl>(i)->mlp->swiglu()) << "gpt2's MLP has no gate";
    }
  }
  // Again: nothing moves.
  const void* q0 = net->blocks->ptr<model::BlockImpl>(0)->attn->wq->weight.data_ptr();
  EXPECT_EQ(model::fuse_projections(*net), groups);
  EXPECT_EQ(net->blocks->ptr<model::BlockImpl>(0)->attn->wq->weight.data_ptr(), q0);
}

// The model's own forward (the training path's modules, each layer its own GEMM on its view) gives the same logits.
TEST_P(FusedProjections, ModelForwardUnchanged) {
  torch::NoGradGuard no_grad;
  auto net = fused_projections_model(GetParam());
  const auto tokens = at::tensor(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, at::kLong).view({1, -1});
  const auto want = net->forward(tokens);
  model::fuse_projections(*net);
  EXPECT_TRUE(at::equal(net->forward(tokens), want));
}

INSTANTIATE_TEST_SUITE_P(Families, FusedProjections, ::testing::Values("llama", "gpt2"));

// Layers with adapters keep their own forward: q/k/v stay apart where q is adapted, gate/up are fused.
TEST(FusedProjectionsLora, AdaptedLayersStayApart) {
  auto net = fused_projections_model("llama", "q");
  EXPECT_EQ(model::fuse_projections(*net), static_cast<int64_t>(net->blocks->size()));
  EXPECT_FALSE(qkv_of(*net, 0).weight.defined());
  EXPECT_TRUE(gate_up_of(*net, 0).weight.defined());
}

// FP8 matmuls are not x·Wᵀ + b in one GEMM of the weights: such a group is left alone, and a fused group whose
// layer turns FP8 on afterwards is no longer found.
TEST(FusedProjectionsFp8, Fp8LayersAreNotFused) {
  auto net = fused_projections_model("llama");
  auto& a = *net->blocks->ptr<model::BlockImpl>(0)->attn;
  a.wk->set_fp8(Fp8Scaling::tensorwise);
  EXPECT_EQ(model::fuse_projections(*net), static_cast<int64_t>(net->blocks->size()) * 2 - 1);
  EXPECT_FALSE(qkv_of(*net, 0).weight.defined());
  ASSERT_TRUE(gate_up_of(*net, 0).weight.defined());
  net->blocks->ptr<model::BlockImpl>(0)->mlp->up->set_fp8(Fp8Scaling::rowwise);
  EXPECT_FALSE(gate_up_of(*net, 0).weight.defined());
}

}  // namespace
