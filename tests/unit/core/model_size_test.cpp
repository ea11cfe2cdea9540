// ModelSize: parameter counts of known models, and the sizes the issue reported failing inside LibTorch with
// std::bad_alloc, now one line with the arithmetic (validate()) or the device's memory (check_fits_device).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/model_size.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::user_error;

namespace {

Config sized_config() {
  Config c;
  c.source = "cfg.yaml";
  c.data.train = {"data/*.bin"};
  return c;
}

int64_t params_of(const std::string& preset) {
  ModelConfig m;
  apply_model_preset(preset, m);
  return static_cast<int64_t>(model_size(m).params);
}

}  // namespace

TEST(ModelSize, CountsMatchThePublishedModels) {
  EXPECT_EQ(params_of("gpt2-124m"), 124439808);     // GPT2LMHeadModel, tied head
  EXPECT_EQ(params_of("llama3.2-1b"), 1235814400);  // LlamaForCausalLM, tied head
  EXPECT_EQ(params_of("llama3.1-8b"), 8030261248);  // untied head
}

TEST(ModelSize, SizesBeyond64BitsAreOneLineWithTheArithmetic) {
  struct Case {
    void (*set)(Config&);
    const char* fragment;
  };
  const Case cases[] = {
      {[](Config& c) { c.model.d_model = 1099511627776; c.model.n_head = 1; }, "d_model(1099511627776)"},
      {[](Config& c) { c.model.max_seq_len = int64_t{1} << 62; }, "pos_embed max_seq_len(4.61e+18) × d_model"},
      {[](Config& c) { c.model.n_layer = std::numeric_limits<int64_t>::max(); }, "n_layer(9.22e+18)"},
  };
  for (const Case& k : cases) {
    Config c = sized_config();
    k.set(c);
    std::string msg = user_error([&] { validate(c, 0); });
    EXPECT_EQ(msg.rfind("cfg.yaml: model: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(k.fragment), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than 64-bit sizes hold"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A llama has no position table; its sequence length still sizes every micro-batch's logits.
  Config c = sized_config();
  c.model.family = Family::llama;
  c.model.max_seq_len = int64_t{1} << 62;
  std::string msg = user_error([&] { validate(c, 0); });
  EXPECT_NE(msg.find("cfg.yaml: data.seq_len: one micro-batch's logits are train.micro_batch_size(8) × "
                     "sequence(4.61e+18) × vocab_size(256) × 4 bytes"), std::string::npos) << msg;
}

TEST(ModelSize, TheDeviceMustHoldThisRanksShare) {
  Config c = sized_config();
  c.model.vocab_size = int64_t{1} << 31;  // 2^31 × 256 × 2 (untied) ≈ 1.1e12 parameters: valid, but huge
  c.model.tie_embeddings = false;
  EXPECT_NO_THROW(validate(c, 0));
  resolve(c, 1);
  std::string msg = user_error([&] { check_fits_device(c, true, int64_t{64} << 30, "cpu"); });
  EXPECT_NE(msg.find("cfg.yaml: model: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("per rank for training (fp32 weights, gradients and AdamW moments, under tp(1), fsdp(1), "
                     "zero_stage 0) but cpu has 64 GiB"), std::string::npos) << msg;
  // A model that fits; and sharding divides the share: 1M parameters need 16 MB to train, 4 MB to hold.
  Config small = sized_config();
  resolve(small, 1);
  const int64_t p = static_cast<int64_t>(model_size(small.model).params);
  EXPECT_NO_THROW(check_fits_device(small, true, 16 * p, "cpu"));
  EXPECT_ANY_THROW(check_fits_device(small, true, 16 * p - 1, "cpu"));
  EXPECT_NO_THROW(check_fits_device(small, false, 4 * p, "cpu"));
  // optimizer.offload: cpu with accumulation under the delayed update: the moments are on the host, fp32
  // weights and gradients (8 bytes) stay (a whole model streams its gradients only without accumulation, and
  // holds them in the compute dtype with it unless the update is delayed: core/gradient_streaming.h).
  Config offloaded = small;
  offloaded.optimizer.offload = OptimizerOffload::cpu;
  offloaded.optimizer.offload_delay = 1;
  offloaded.train.grad_accum = 2;
  EXPECT_NO_THROW(check_fits_device(offloaded, true, 8 * p, "cpu"));
  EXPECT_NE(user_error([&] { check_fits_device(offloaded, true, 8 * p - 1, "cpu"); })
                .find("training (fp32 weights and gradients; the AdamW moments are on the host"),
            std::string::npos);
  // Held (not delayed): weights and gradients in the compute dtype, counted as the fp32 weights' 4 bytes.
  offloaded.optimizer.offload_delay = 0;
  EXPECT_NO_THROW(check_fits_device(offloaded, true, 4 * p, "cpu"));
  EXPECT_NE(user_error([&] { check_fits_device(offloaded, true, 4 * p - 1, "cpu"); })
                .find("training (weights and gradients in the compute dtype; the AdamW state is on the host"),
            std::string::npos);
  // Without accumulation the gradients stream to the host too: the weights (4 bytes) stay.
  offloaded.train.grad_accum = 1;
  EXPECT_NO_THROW(check_fits_device(offloaded, true, 4 * p, "cpu"));
  EXPECT_NE(user_error([&] { check_fits_device(offloaded, true, 4 * p - 1, "cpu"); })
                .find("training (fp32 weights; the gradients and AdamW moments are on the host"),
            std::string::npos);
  small.parallel.fsdp = 4;  // FSDP: everything in quarters
  EXPECT_NO_THROW(check_fits_device(small, true, 4 * p, "cpu"));
  EXPECT_ANY_THROW(check_fits_device(small, true, 4 * p - 1, "cpu"));
}

// LoRA's base does not train: its bytes in the compute dtype (bf16) bound the share, QLoRA's in NF4 (0.5 a
// parameter) — so a 70B QLoRA passes on one 80 GB GPU, where the bf16 base (140 GB) is refused.
TEST(ModelSize, AFrozenLoraBaseCountsItsHeldBytes) {
  Config c = parse_config("{}", "cfg.yaml", true, {"model.preset=llama3.1-70b", "model.lora_rank=16",
                                                     "data.train=synthetic"});
  resolve(c, 1);
  const int64_t gpu = int64_t{80} << 30;
  const std::string msg = user_error([&] { check_fits_device(c, true, gpu, "cuda:0"); });
  EXPECT_NE(msg.find("per rank for the frozen LoRA base (in the compute dtype; the adapters' state not counted, under "
                      "tp(1), fsdp(1), zero_stage 0) but cuda:0 has 80 GiB"),
            std::string::npos) << msg;
  c.model.base_quant = BaseQuant::nf4;
  EXPECT_NO_THROW(check_fits_device(c, true, gpu, "cuda:0"));
  const int64_t p = static_cast<int64_t>(model_size(c.model).params);
  EXPECT_ANY_THROW(check_fits_device(c, true, p / 2 - 1, "cuda:0"));
  // FSDP shards the NF4 rows too: an eighth of the 0.5 bytes a rank under FSDP 8.
  Config f = parse_config("{}", "cfg.yaml", true, {"model.preset=llama3.1-70b", "model.lora_rank=16",
                                                    "model.base_quant=nf4", "data.train=synthetic", "parallel.fsdp=8"});
  resolve(f, 8);
  EXPECT_NO_THROW(check_fits_device(f, true, p / 16 + 1, "cuda:0"));
  EXPECT_ANY_THROW(check_fits_device(f, true, p / 16 - 1, "cuda:0"));
}
