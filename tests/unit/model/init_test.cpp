// Deferred (meta) construction, layout-independent initialisation and parameter replacement.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/model/init.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

ModelConfig small(const std::string& family) {
  return testing_support::tiny_model({.family = family, .n_kv_head = 2, .d_ff = 96});
}

}  // namespace

TEST(Init, MetaModelAllocatesNothingAndMaterialisesToTheSameValuesAsEagerInit) {
  for (auto family : {"gpt2", "llama"}) {
    model::Transformer meta(small(family), at::TensorOptions().device(at::kMeta));
    for (const auto& p : meta->parameters()) EXPECT_TRUE(p.is_meta());
    meta->materialize(at::Device(at::kCPU), 42);

    model::Transformer eager(small(family));
    eager->init_weights(42);
    auto mp = meta->named_parameters();
    for (const auto& item : eager->named_parameters()) {
      ASSERT_FALSE(mp[item.key()].is_meta()) << item.key();
      EXPECT_TRUE(mp[item.key()].requires_grad()) << item.key();
      EXPECT_TRUE(at::equal(mp[item.key()], item.value())) << family << " " << item.key();
    }
    // The modules' members see the new tensors too (forward uses them).
    auto x = at::randint(0, 64, {2, 8}, at::kLong);
    EXPECT_TRUE(at::equal(meta->forward(x), eager->forward(x))) << family;
  }
}

TEST(Init, EachParameterDependsOnSeedAndNameOnly) {
  auto cfg = small("llama");
  model::Transformer a(cfg), b(cfg);
  a->init_weights(1);
  b->init_weights(2);
  auto ap = a->named_parameters(), bp = b->named_parameters();
  EXPECT_FALSE(at::equal(ap["blocks.0.attn.wq.weight"], bp["blocks.0.attn.wq.weight"]));
  // Same shape, different names: different values.
  EXPECT_FALSE(at::equal(ap["blocks.0.attn.wq.weight"], ap["blocks.1.attn.wq.weight"]));
  EXPECT_TRUE(at::equal(ap["blocks.0.attn_norm.weight"], at::ones({32})));
}

TEST(Init, ABlockOfAParameterEqualsTheSameSliceOfTheWholeParameter) {
  auto cfg = small("gpt2");
  auto full = at::empty({64, 32});
  model::init_parameter(cfg, "tok_embed.weight", full, 5);
  auto rows = at::empty({16, 32});
  model::init_parameter_block(cfg, "tok_embed.weight", {64, 32}, {48, 0}, rows, 5);
  EXPECT_TRUE(at::equal(rows, full.narrow(0, 48, 16)));
  auto cols = at::empty({64, 8});
  model::init_parameter_block(cfg, "tok_embed.weight", {64, 32}, {0, 8}, cols, 5);
  EXPECT_TRUE(at::equal(cols, full.narrow(1, 8, 8)));
}

TEST(Init, ReplaceParametersSwapsRegistryAndMemberTogether) {
  model::Transformer net(small("gpt2"));
  net->init_weights(3);
  model::replace_parameters(*net, [](const std::string& name, const at::Tensor& p) {
    return name == "final_norm.weight" ? at::full_like(p, 2.0) : p;
  });
  EXPECT_TRUE(at::equal(net->named_parameters()["final_norm.weight"], at::full({32}, 2.0)));
  EXPECT_TRUE(at::equal(net->final_norm->weight, at::full({32}, 2.0)));
  EXPECT_TRUE(net->final_norm->weight.requires_grad());
}
