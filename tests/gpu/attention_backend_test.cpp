// train.attention_backend on CUDA: flash and cuDNN attention give the loss and gradients of the math backend
// (SDPA's reference, which computes bf16 inputs in fp32) within bf16 rounding, for Llama (RoPE, GQA) and GPT-2
// under bf16 autocast, and the backends a bench shape can run are listed. Bounds: loss within 1 % relative;
// each parameter's gradient within 5 % of its largest element (max abs difference), as for the other bf16
// attention paths (document_attention_test.cpp), or 1e-3 of the model's largest gradient where that is larger. Exit code 77 (skipped) without a GPU.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/attention_backend.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;
using testing_support::tiny_model;

namespace {

struct Outcome {
  double loss = 0;
  std::vector<at::Tensor> grads;
};

// One forward/backward under bf16 autocast with SDPA restricted to `b`.
Outcome run(model::Transformer& net, AttentionBackend b, const at::Tensor& tokens, const at::Tensor& targets) {
  model::use_attention_backend(b);
  for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  auto loss = net->loss(tokens, targets);
  loss.backward();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  model::use_attention_backend(AttentionBackend::automatic);
  Outcome r{loss.item<double>(), {}};
  for (auto& p : net->parameters()) r.grads.push_back(p.grad().to(at::kFloat).clone());
  return r;
}

// The model's attention as the check at start-up describes it.
model::AttentionShape shape_of(const ModelConfig& m, int64_t batch, int64_t seq) {
  return {.batch = batch, .heads = m.n_head, .kv_heads = m.n_kv_head > 0 ? m.n_kv_head : m.n_head, .seq_len = seq,
          .head_dim = m.d_model / m.n_head, .dtype = at::kBFloat16, .device = at::Device(at::kCUDA, 0)};
}

void expect_same_as_math(const ModelConfig& m, const char* what) {
  at::manual_seed(0);
  model::Transformer net(m, at::TensorOptions().device(at::kCUDA));
  net->init_weights(7);
  const int64_t B = 2, T = m.max_seq_len;
  auto tokens = at::randint(0, m.vocab_size, {B, T}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  auto targets = tokens.roll(-1, 1);
  const Outcome want = run(net, AttentionBackend::math, tokens, targets);
  for (AttentionBackend b : {AttentionBackend::flash, AttentionBackend::cudnn}) {
    std::string why;
    if (!model::attention_backend_runs(b, shape_of(m, B, T), &why)) {
      // cuDNN attention needs cuDNN ≥ 9 and a recent GPU: say so rather than fail on an older machine.
      std::printf("%s: %s cannot run here (%s): not compared\n", what, enum_c_str(b), why.c_str());
      continue;
    }
    const Outcome got = run(net, b, tokens, targets);
    EXPECT_NEAR(got.loss, want.loss, 1e-2 * std::abs(want.loss)) << what << " " << enum_c_str(b);
    // A tensor whose true gradient is 0 (GPT-2's key biases: softmax ignores a shift shared by every key) holds
    // only the backward's bf16 noise, 2e-6 on the H200 with max |g| 3e-6: each tensor is held to 5 % of its own
    // largest element or 1e-3 of the model's largest gradient, whichever is larger.
    double model_scale = 0;
    for (const auto& g : want.grads) model_scale = std::max(model_scale, g.abs().max().item<double>());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      const double scale = want.grads[i].abs().max().item<double>();
      const double diff = (got.grads[i] - want.grads[i]).abs().max().item<double>();
      EXPECT_LE(diff, std::max(5e-2 * scale, 1e-3 * model_scale))
          << what << " " << enum_c_str(b) << " parameter " << i;
    }
    std::printf("%s: %s loss %.6f vs math %.6f\n", what, enum_c_str(b), got.loss, want.loss);
  }
}

}  // namespace

TEST(AttentionBackendGpu, FlashAndCudnnMatchMathLlama) {
  // Head dim 64 as the Llama presets have; 8 query heads over 2 key/value heads (GQA).
  expect_same_as_math(tiny_model({.family = "llama", .vocab_size = 128, .n_head = 8, .n_kv_head = 2, .d_model = 512,
                                  .d_ff = 1024, .max_seq_len = 256}),
                      "llama");
}

TEST(AttentionBackendGpu, FlashAndCudnnMatchMathGpt2) {
  expect_same_as_math(tiny_model({.family = "gpt2", .vocab_size = 128, .n_head = 8, .n_kv_head = 8, .d_model = 512,
                                  .d_ff = 2048, .max_seq_len = 256}),
                      "gpt2");
}

TEST(AttentionBackendGpu, ChoiceIsRestrictedAndRestored) {
  model::use_attention_backend(AttentionBackend::cudnn);
  EXPECT_TRUE(at::globalContext().userEnabledCuDNNSDP());
  EXPECT_FALSE(at::globalContext().userEnabledFlashSDP());
  EXPECT_FALSE(at::globalContext().userEnabledMathSDP());
  model::use_attention_backend(AttentionBackend::automatic);
  EXPECT_TRUE(at::globalContext().userEnabledFlashSDP());
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());
}

TEST(AttentionBackendGpu, BenchShapesListWhatRuns) {
  // The three shapes of scripts/bench/train_compare.py (attention per layer): math runs them all; what else
  // runs on this GPU is printed for the record.
  struct Shape {
    const char* name;
    int64_t heads, kv_heads, head_dim, batch, seq;
  };
  for (const Shape& s : {Shape{"gpt2-124m b32 T1024", 12, 12, 64, 32, 1024},
                         Shape{"llama3.2-1b b8 T2048", 32, 8, 64, 8, 2048},
                         Shape{"llama3.1-8b b4 T2048", 32, 8, 128, 4, 2048}}) {
    const model::AttentionShape a{.batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads, .seq_len = s.seq,
                                  .head_dim = s.head_dim, .dtype = at::kBFloat16,
                                  .device = at::Device(at::kCUDA, 0)};
    std::string list;
    for (AttentionBackend b : model::runnable_attention_backends(a)) list += cat(" ", enum_c_str(b));
    std::printf("%s: runs%s\n", s.name, list.c_str());
    EXPECT_TRUE(model::attention_backend_runs(AttentionBackend::math, a)) << s.name;
  }
}

int main(int argc, char** argv) { return meshtrain::testing_support::run_gpu_tests(argc, argv); }
