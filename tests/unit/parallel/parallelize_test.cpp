#include "meshtrain/parallel/parallelize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

using namespace meshtrain;

namespace {

Config tiny() {
  Config c;
  c.source = "test.yaml";
  c.model.vocab_size = 64;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.d_model = 16;
  c.model.max_seq_len = 8;
  c.data.train = "x";
  return c;
}

model::Transformer meta(const Config& c) { return model::Transformer(c.model, at::TensorOptions().device(at::kMeta)); }

}  // namespace

TEST(Parallelize, TensorParallelIsAClearErrorUntilAvailable) {
  Config c = tiny();
  c.parallel.tp = 2;
  resolve(c, 2);
  EXPECT_NE(testing_support::user_error([&] { parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU)); })
                .find("test.yaml: parallel.tp: given 2; valid 1"),
            std::string::npos);
}

TEST(Parallelize, ZeroStageWithFsdpIsValidated) {
  Config c = tiny();
  c.parallel.fsdp = 2;
  c.parallel.zero_stage = 2;
  EXPECT_NE(testing_support::user_error([&] { validate(c, 4); }).find("parallel.zero_stage: given 2 with parallel.fsdp 2"),
            std::string::npos);
  c.parallel.zero_stage = 4;
  EXPECT_NE(testing_support::user_error([&] { validate(c, 4); }).find("parallel.zero_stage"), std::string::npos);
}

TEST(Parallelize, SingleProcessLayouts) {
  for (int stage : {0, 1, 2, 3}) {
    Config c = tiny();
    c.parallel.zero_stage = stage;
    c.parallel.force_wrapper = true;
    resolve(c, 1);
    auto pm = parallel::parallelize(meta(c), {}, c, at::Device(at::kCPU));
    EXPECT_EQ(pm->replicated(), stage == 0);
    auto tokens = at::randint(64, {2, 8}, at::kLong);
    auto loss = pm->loss(tokens, tokens);
    pm->backward(loss, true);
    for (const auto& p : pm->optimizer_params()) EXPECT_TRUE(p.param.grad().defined()) << p.name << " stage " << stage;
    EXPECT_GT(pm->clip_grad_norm(0).item<double>(), 0);
  }
}
