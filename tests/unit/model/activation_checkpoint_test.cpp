// Activation checkpointing changes memory, never results: the same loss and gradients as the plain run.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "meshtrain/model/activation_checkpoint.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

ModelConfig small(const std::string& family, double dropout) {
  return testing_support::tiny_model({.family = family, .n_layer = 3, .n_kv_head = 2, .d_ff = 96,
                                      .tie_embeddings = true, .dropout = dropout});
}

// Loss and every gradient of one forward/backward.
std::pair<double, std::map<std::string, at::Tensor>> loss_and_grads(model::Transformer& net, bool checkpoint) {
  net->set_block_runner(checkpoint ? model::activation_checkpointing_runner() : model::BlockRunner{});
  net->zero_grad();
  at::manual_seed(11);  // dropout masks
  auto x = at::arange(0, 2 * 12, at::kLong).remainder(64).view({2, 12});
  auto loss = net->loss(x, (x + 1).remainder(64));
  loss.backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& item : net->named_parameters()) grads[item.key()] = item.value().grad().clone();
  return {loss.item<double>(), grads};
}

}  // namespace

TEST(ActivationCheckpoint, SameLossAndGradientsAsThePlainRun) {
  for (auto family : {"gpt2", "llama"}) {
    for (double dropout : {0.0, 0.1}) {
      model::Transformer net(small(family, dropout));
      net->init_weights(9);
      net->train();
      auto [plain_loss, plain] = loss_and_grads(net, false);
      auto [ck_loss, ck] = loss_and_grads(net, true);
      EXPECT_EQ(plain_loss, ck_loss) << family << " dropout " << dropout;
      for (const auto& [name, g] : plain)
        EXPECT_TRUE(at::allclose(ck[name], g, 1e-5, 1e-7)) << family << " dropout " << dropout << " " << name;
    }
  }
}

TEST(ActivationCheckpoint, RecomputesTheBlockInBackward) {
  int calls = 0;
  auto w = at::randn({4, 4}).requires_grad_(true);
  model::BlockFn run = [&calls, w](const at::Tensor& x) {
    ++calls;
    return at::tanh(at::matmul(x, w));
  };
  auto x = at::randn({3, 4}).requires_grad_(true);
  auto y = model::checkpointed(run, x, {w});
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.grad_fn() == nullptr);
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  auto gx = x.grad().clone(), gw = w.grad().clone();
  x.mutable_grad().reset();
  w.mutable_grad().reset();
  run(x).sum().backward();
  EXPECT_TRUE(at::allclose(gx, x.grad()));
  EXPECT_TRUE(at::allclose(gw, w.grad()));
}

TEST(ActivationCheckpoint, NoGradModeJustRunsTheBlock) {
  at::NoGradGuard no_grad;
  int calls = 0;
  model::BlockFn run = [&calls](const at::Tensor& x) {
    ++calls;
    return x * 2;
  };
  auto y = model::checkpointed(run, at::ones({2}), {});
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(at::equal(y, at::full({2}, 2.0)));
}
