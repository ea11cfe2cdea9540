// train.fp8 off the GPU: the setting parses (a misspelling names the key and the valid values), a CPU device
// reports no FP8 matmuls (the trainer then refuses the setting with one line), and a model whose linears
// were switched to FP8 runs its ordinary matmuls on CPU tensors: the same loss and gradients, bit for bit. Which
// layers train.fp8 switches: those wide enough to gain (fp8_pays), q/k/v and gate/up judged as groups.
// The FP8 matmuls themselves are checked on a GPU (tests/gpu/fp8_linear_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

TEST(Fp8Setting, ParsesTheFourValuesAndNamesTheKey) {
  EXPECT_EQ(TrainConfig{}.fp8, Fp8Scaling::off);
  EXPECT_EQ(parse_enum<Fp8Scaling>("tensorwise", "train.fp8"), Fp8Scaling::tensorwise);
  EXPECT_EQ(parse_enum<Fp8Scaling>("rowwise", "train.fp8"), Fp8Scaling::rowwise);
  EXPECT_EQ(parse_enum<Fp8Scaling>("delayed", "train.fp8"), Fp8Scaling::delayed);
  try {
    parse_enum<Fp8Scaling>("e4m3", "train.fp8");
    FAIL() << "no error for train.fp8=e4m3";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("train.fp8: given 'e4m3'; valid off | tensorwise | rowwise | delayed"),
              std::string::npos)
        << e.what();
  }
}

TEST(Fp8Linear, NoFp8OnTheCpuAndTheModelUnchanged) {
  EXPECT_FALSE(model::fp8_matmul_available(c10::Device(at::kCPU)));
  const auto x = at::randn({32, 64});
  EXPECT_FALSE(model::fp8_applies(x, at::randn({16, 64})));
  for (const std::string family : {"gpt2", "llama"}) {
    at::manual_seed(1);
    const auto cfg = testing_support::tiny_model({.family = family, .n_kv_head = family == "llama" ? 2 : 4,
                                                  .d_ff = family == "gpt2" ? 128 : 96, .max_seq_len = 32});
    model::Transformer a(cfg);
    a->init_weights(3);
    model::Transformer b(cfg);
    b->init_weights(3);
    model::use_fp8(*b, Fp8Scaling::tensorwise, /*min_width=*/0);
    auto tokens = at::randint(0, 64, {2, 16}, at::kLong), targets = at::randint(0, 64, {2, 16}, at::kLong);
    auto la = a->loss(tokens, targets), lb = b->loss(tokens, targets);
    la.backward();
    lb.backward();
    EXPECT_TRUE(at::equal(la, lb)) << family;
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i].grad(), pb[i].grad())) << family << " " << i;
  }
}

// The width rule against the shapes it was set from: GPT-2 124M's layers (768 → 2304, 768 → 3072, 3072 → 768,
// 768 → 768) stay in bf16; every layer of the Llama 3.2 1B (q/k/v as one group of 3,072 outputs, o 2,048 → 2,048
// exactly at the bound, the MLP) and the 3.1 8B shape goes to FP8. Counted on models built on the meta device.
TEST(Fp8Linear, WidthRuleKeepsGpt2InBf16AndEveryLlamaLayerInFp8) {
  const int64_t width = TrainConfig{}.fp8_min_width;  // the default the trainer passes
  EXPECT_EQ(width, 1024);
  EXPECT_FALSE(model::fp8_pays(768, 2304, width));
  EXPECT_FALSE(model::fp8_pays(768, 3072, width));
  EXPECT_FALSE(model::fp8_pays(3072, 768, width));
  EXPECT_TRUE(model::fp8_pays(2048, 2048, width));  // in·out / (in + out) = 1024, the bound
  EXPECT_FALSE(model::fp8_pays(2048, 2040, width));
  EXPECT_TRUE(model::fp8_pays(2048, 3072, width));
  EXPECT_TRUE(model::fp8_pays(64, 16, 0));
  EXPECT_THROW(model::fp8_pays(0, 16, width), Error);

  struct Case {
    const char* preset;
    bool all;  // every layer FP8 (else none)
  };
  for (Case c : {Case{"gpt2-124m", false}, Case{"llama3.2-1b", true}, Case{"llama3.1-8b", true}}) {
    SCOPED_TRACE(c.preset);
    ModelConfig cfg;
    apply_model_preset(c.preset, cfg);
    cfg.n_layer = 2;  // the widths are the preset's
    model::Transformer net(cfg, at::TensorOptions().device(at::kMeta));
    const int64_t per_block = cfg.family == Family::llama ? 7 : 6;  // q, k, v, o and gate, up, down (GPT-2: fc, proj)
    const model::Fp8Layers n = model::use_fp8(*net, Fp8Scaling::tensorwise, width);
    EXPECT_EQ(n.layers, 2 * per_block);
    EXPECT_EQ(n.fp8, c.all ? n.layers : 0);
    EXPECT_EQ(model::use_fp8(*net, Fp8Scaling::rowwise, 0).fp8, n.layers);  // 0: every layer
    EXPECT_EQ(model::use_fp8(*net, Fp8Scaling::off, 0).fp8, 0);
  }
}
