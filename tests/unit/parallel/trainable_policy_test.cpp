// TrainablePolicy: train.freeze globs over parameter names, and the mark it leaves on the module.
#include "meshtrain/parallel/trainable_policy.h"

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using parallel::TrainablePolicy;

TEST(TrainablePolicy, GlobsCrossDotsAndStopAtTheBlockNumber) {
  TrainConfig t;
  t.freeze = {"blocks.1.*", "*.bias"};
  const auto policy = TrainablePolicy::from_config(t);
  EXPECT_FALSE(policy.trains("blocks.1.attn.wq.weight"));
  EXPECT_FALSE(policy.trains("blocks.3.attn.wq.bias"));
  EXPECT_TRUE(policy.trains("blocks.10.attn.wq.weight"));  // "blocks.1." is not a prefix of it
  EXPECT_TRUE(policy.trains("tok_embed.weight"));
  EXPECT_TRUE(TrainablePolicy().trains("blocks.1.attn.wq.weight"));
  EXPECT_FALSE(TrainablePolicy().freezes_any());
}

TEST(TrainablePolicy, ApplyMarksTheModuleAndMoreCanBeFrozenLater) {
  Config c;
  c.model = testing_support::tiny_model({.n_layer = 2});
  c.train.freeze = {"blocks.0.*"};
  resolve(c, 1);
  model::Transformer net(c.model);
  auto policy = TrainablePolicy::from_config(c.train);
  policy.freeze({"tok_embed.*"});  // e.g. an adapter freezing more of its base
  policy.apply(*net);
  for (const auto& item : net->named_parameters()) {
    const bool frozen = item.key().rfind("blocks.0.", 0) == 0 || item.key() == "tok_embed.weight";
    EXPECT_EQ(item.value().requires_grad(), !frozen) << item.key();
  }
  policy.freeze({"no_such.*"});
  EXPECT_NE(testing_support::user_error([&] { policy.apply(*net); }).find("train.freeze: pattern 'no_such.*' matches no"),
            std::string::npos);
}
