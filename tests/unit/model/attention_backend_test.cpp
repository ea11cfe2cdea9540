// train.attention_backend on the CPU: which SDPA kernels a shape can run (asked of ATen), the one-line refusal
// that names the key, the shape and what would run, and the switch that restricts SDPA for the process — with
// the model's loss unchanged under the math kernel and under flash attention's CPU kernel.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/model/attention_backend.h"
#include "meshtrain/model/documents.h"
#include "meshtrain/model/transformer.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using model::AttentionShape;
using testing_support::tiny_model;
using testing_support::user_error;

namespace {

AttentionShape cpu_shape() {
  return {.batch = 2, .heads = 4, .kv_heads = 2, .seq_len = 16, .head_dim = 8, .dtype = at::kFloat,
          .device = at::kCPU};
}

// ATen's switches now, to see that probing leaves them as they were.
std::vector<bool> switches() {
  auto& c = at::globalContext();
  return {c.userEnabledFlashSDP(), c.userEnabledMemEfficientSDP(), c.userEnabledMathSDP(), c.userEnabledCuDNNSDP()};
}

}  // namespace

TEST(AttentionBackend, CpuRunsMathAndFlashOnly) {
  const auto before = switches();
  const auto runs = model::runnable_attention_backends(cpu_shape());
  // ATen's CPU flash kernel takes causal fp32 attention; the memory-efficient and cuDNN kernels are CUDA's.
  EXPECT_EQ(runs, (std::vector<AttentionBackend>{AttentionBackend::automatic, AttentionBackend::flash,
                                                 AttentionBackend::math}));
  EXPECT_EQ(switches(), before);
}

TEST(AttentionBackend, RefusalIsOneLineNamingKeyShapeAndWhatRuns) {
  for (AttentionBackend b : {AttentionBackend::cudnn, AttentionBackend::efficient}) {
    const std::string msg = user_error([&] { model::check_attention_backend(b, cpu_shape()); });
    const std::string head = cat("train.attention_backend: given '", enum_c_str(b),
                                 "', which cannot run q [2, 4, 16, 8], 2 kv heads, fp32 on cpu (");
    EXPECT_EQ(msg.rfind(head, 0), 0u) << msg;
    EXPECT_NE(msg.find("); valid here auto | flash | math"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(model::check_attention_backend(AttentionBackend::math, cpu_shape()));
  EXPECT_NO_THROW(model::check_attention_backend(AttentionBackend::automatic, cpu_shape()));
}

TEST(AttentionBackend, PackedDocumentsProbeTheMaskedKernel) {
  AttentionShape s = cpu_shape();
  s.documents = true;
  // No variable-length flash on the CPU: packed documents run the masked SDPA, which the CPU's flash and math
  // kernels both take.
  EXPECT_EQ(model::runnable_attention_backends(s), (std::vector<AttentionBackend>{AttentionBackend::automatic,
                                                                                   AttentionBackend::flash,
                                                                                   AttentionBackend::math}));
  const std::string msg = user_error([&] { model::check_attention_backend(AttentionBackend::cudnn, s); });
  EXPECT_NE(msg.find("fp32 on cpu, packed documents (ATen has no such kernel on the CPU); valid here auto | flash | math"),
            std::string::npos)
      << msg;
  // Where flash's variable-length kernel takes packed documents: half precision on CUDA, head sizes ≤ 256 in 8s.
  EXPECT_TRUE(model::varlen_flash_runs(at::Device(at::kCUDA, 0), at::kBFloat16, 64));
  EXPECT_FALSE(model::varlen_flash_runs(at::Device(at::kCUDA, 0), at::kFloat, 64));
  EXPECT_FALSE(model::varlen_flash_runs(at::kCPU, at::kBFloat16, 64));
  EXPECT_FALSE(model::varlen_flash_runs(at::Device(at::kCUDA, 0), at::kBFloat16, 260));
}

TEST(AttentionBackend, SwitchRestrictsSdpaAndAutoRestoresAll) {
  model::use_attention_backend(AttentionBackend::math);
  EXPECT_EQ(switches(), (std::vector<bool>{false, false, true, false}));
  auto q = at::randn({1, 2, 8, 4});
  EXPECT_EQ(at::_fused_sdp_choice(q, q, q, {}, 0.0, true), static_cast<int64_t>(at::SDPBackend::math));
  model::use_attention_backend(AttentionBackend::flash);
  EXPECT_EQ(at::_fused_sdp_choice(q, q, q, {}, 0.0, true), static_cast<int64_t>(at::SDPBackend::flash_attention));
  model::use_attention_backend(AttentionBackend::automatic);
  EXPECT_EQ(switches(), (std::vector<bool>{true, true, true, true}));
}

TEST(AttentionBackend, ModelLossTheSameUnderEachCpuKernel) {
  at::manual_seed(0);
  const auto m = tiny_model({.family = "llama", .n_kv_head = 2, .d_ff = 64});
  model::Transformer net(m, at::TensorOptions());
  net->init_weights(5);
  auto tokens = at::randint(0, m.vocab_size, {2, 16}, at::kLong);
  auto targets = tokens.roll(-1, 1);
  auto loss_under = [&](AttentionBackend b) {
    model::use_attention_backend(b);
    const double l = net->loss(tokens, targets).item<double>();
    model::use_attention_backend(AttentionBackend::automatic);
    return l;
  };
  const double want = loss_under(AttentionBackend::automatic);
  EXPECT_NEAR(loss_under(AttentionBackend::math), want, 1e-5 * want);
  EXPECT_NEAR(loss_under(AttentionBackend::flash), want, 1e-5 * want);
}
