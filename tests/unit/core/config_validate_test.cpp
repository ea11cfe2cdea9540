// validate() and resolve(): one test per rule, each asserting the exact fragment of its one-line message, and
// the derived values resolve() fills in.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/nccl_env.h"
#include "support/test_support.h"

using namespace meshtrain;

namespace {

// A config that passes every rule at world size 8; each test breaks one thing.
Config good() {
  Config c;
  c.source = "cfg.yaml";
  c.data.train = {"data/*.bin"};
  return c;
}

// Expects validate(c, world) to fail with a message containing `fragment`, and the message to be one line
// that starts with the file name.
void expect_invalid(const Config& c, const std::string& fragment, int world = 8) {
  std::string msg = testing_support::user_error([&] { validate(c, world); });
  EXPECT_NE(msg.find(fragment), std::string::npos) << "message: " << msg;
  EXPECT_EQ(msg.rfind("cfg.yaml: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace

TEST(ConfigValidate, DefaultsWithTrainDataAreValid) {
  EXPECT_NO_THROW(validate(good(), 8));
  EXPECT_NO_THROW(validate(good(), 0));
  Config c = good();
  resolve(c, 8);
  EXPECT_NO_THROW(validate(c, 8));  // before or after resolve
}

TEST(ConfigValidate, TrainDataIsRequired) {
  Config c = good();
  c.data.train = {};
  expect_invalid(c, "cfg.yaml: data.train: required (a file or a glob of token shards)");
  c.source = "";
  EXPECT_NE(testing_support::user_error([&] { validate(c, 1); }).find("config: data.train: required"), std::string::npos);
}

// Enumerations are typed (the loader refuses other spellings: config_load_test.cpp); the preset is a string
// checked against the preset table, and may be empty; checkpoint.resume is open-ended (a path).
TEST(ConfigValidate, PresetIsOneOfTheTable) {
  Config c = good();
  c.model.preset = "huge";
  expect_invalid(c, "model.preset: given 'huge'; valid tiny | gpt2-124m");
  c.model.preset = "gpt2-124";
  expect_invalid(c, ", or empty (did you mean 'gpt2-124m'?)");
  c.model.preset = "";
  c.checkpoint.resume = "runs/x/checkpoints/step_100";
  EXPECT_NO_THROW(validate(c, 8));
}

TEST(ConfigValidate, PositiveAndNonNegativeIntegers) {
  struct Case {
    std::function<void(Config&)> set;
    std::string fragment;
  };
  const Case cases[] = {
      {[](Config& c) { c.model.vocab_size = 0; }, "model.vocab_size: given 0; valid ≥ 1"},
      {[](Config& c) { c.model.n_layer = 0; }, "model.n_layer: given 0; valid ≥ 1"},
      {[](Config& c) { c.model.n_head = 0; }, "model.n_head: given 0; valid ≥ 1"},
      {[](Config& c) { c.model.n_kv_head = -1; }, "model.n_kv_head: given -1; valid ≥ 0"},
      {[](Config& c) { c.model.d_model = -4; }, "model.d_model: given -4; valid ≥ 1"},
      {[](Config& c) { c.model.d_ff = -1; }, "model.d_ff: given -1; valid ≥ 0"},
      {[](Config& c) { c.model.max_seq_len = 0; }, "model.max_seq_len: given 0; valid ≥ 1"},
      {[](Config& c) { c.parallel.dp = -1; }, "parallel.dp: given -1; valid ≥ 0"},
      {[](Config& c) { c.parallel.fsdp = 0; }, "parallel.fsdp: given 0; valid ≥ 1"},
      {[](Config& c) { c.parallel.tp = 0; }, "parallel.tp: given 0; valid ≥ 1"},
      {[](Config& c) { c.parallel.pp = 0; }, "parallel.pp: given 0; valid ≥ 1"},
      {[](Config& c) { c.data.seq_len = -1; }, "data.seq_len: given -1; valid ≥ 0"},
      {[](Config& c) { c.schedule.warmup_steps = -1; }, "schedule.warmup_steps: given -1; valid ≥ 0"},
      {[](Config& c) { c.train.steps = 0; }, "train.steps: given 0; valid ≥ 1"},
      {[](Config& c) { c.train.micro_batch_size = 0; }, "train.micro_batch_size: given 0; valid ≥ 1"},
      {[](Config& c) { c.train.grad_accum = 0; }, "train.grad_accum: given 0; valid ≥ 1"},
      {[](Config& c) { c.train.eval_every = -1; }, "train.eval_every: given -1; valid ≥ 0"},
      {[](Config& c) { c.train.eval_batches = 0; }, "train.eval_batches: given 0; valid ≥ 1"},
      {[](Config& c) { c.train.sample_tokens = -5; }, "train.sample_tokens: given -5; valid ≥ 0"},
      {[](Config& c) { c.train.threads = -1; }, "train.threads: given -1; valid ≥ 0"},
      {[](Config& c) { c.checkpoint.every = -1; }, "checkpoint.every: given -1; valid ≥ 0"},
      {[](Config& c) { c.checkpoint.keep = -1; }, "checkpoint.keep: given -1; valid ≥ 0"},
      {[](Config& c) { c.logging.every = 0; }, "logging.every: given 0; valid ≥ 1"},
  };
  for (const Case& k : cases) {
    Config c = good();
    k.set(c);
    expect_invalid(c, k.fragment, 0);
  }
}

TEST(ConfigValidate, NumberRanges) {
  struct Case {
    std::function<void(Config&)> set;
    std::string fragment;
  };
  const Case cases[] = {
      {[](Config& c) { c.optimizer.lr = 0; }, "optimizer.lr: given 0.0; valid > 0"},
      {[](Config& c) { c.optimizer.lr = -3e-4; }, "optimizer.lr: given -3e-4; valid > 0"},
      {[](Config& c) { c.optimizer.beta1 = 1.0; }, "optimizer.beta1: given 1.0; valid in [0, 1)"},
      {[](Config& c) { c.optimizer.beta2 = -0.1; }, "optimizer.beta2: given -0.1; valid in [0, 1)"},
      {[](Config& c) { c.optimizer.eps = 0; }, "optimizer.eps: given 0.0; valid > 0"},
      {[](Config& c) { c.optimizer.weight_decay = -1; }, "optimizer.weight_decay: given -1.0; valid ≥ 0"},
      {[](Config& c) { c.optimizer.grad_clip = -1; }, "optimizer.grad_clip: given -1.0; valid ≥ 0"},
      {[](Config& c) { c.schedule.min_lr_ratio = 1.5; }, "schedule.min_lr_ratio: given 1.5; valid in [0, 1]"},
      {[](Config& c) { c.schedule.decay_fraction = -0.5; }, "schedule.decay_fraction: given -0.5; valid in [0, 1]"},
      {[](Config& c) { c.model.dropout = 1.0; }, "model.dropout: given 1.0; valid in [0, 1)"},
      {[](Config& c) { c.model.norm_eps = 0; }, "model.norm_eps: given 0.0; valid > 0"},
      {[](Config& c) { c.model.rope_theta = -1; }, "model.rope_theta: given -1.0; valid > 0"},
      {[](Config& c) { c.parallel.bucket_mb = 0; }, "parallel.bucket_mb: given 0.0; valid > 0"},
      {[](Config& c) { c.parallel.timeout_s = 0; }, "parallel.timeout_s: given 0.0; valid > 0"},
      {[](Config& c) { c.model.bos_token_id = -2; }, "model.bos_token_id: given -2; valid ≥ -1"},
      {[](Config& c) { c.model.eos_token_id = 256; },
       "model.eos_token_id: given 256; valid -1 (none) or an id below model.vocab_size (256)"},
      {[](Config& c) { c.optimizer.lr = std::nan(""); }, "optimizer.lr: given nan; valid a finite number"},
      // Fields with no upper bound: an infinite value passed every bound once.
      {[](Config& c) { c.optimizer.lr = HUGE_VAL; }, "optimizer.lr: given inf; valid a finite number"},
      {[](Config& c) { c.optimizer.weight_decay = HUGE_VAL; }, "optimizer.weight_decay: given inf; valid a finite"},
      {[](Config& c) { c.optimizer.grad_clip = HUGE_VAL; }, "optimizer.grad_clip: given inf; valid a finite"},
      {[](Config& c) { c.model.norm_eps = HUGE_VAL; }, "model.norm_eps: given inf; valid a finite"},
      {[](Config& c) { c.parallel.bucket_first_mb = HUGE_VAL; }, "parallel.bucket_first_mb: given inf; valid a finite"},
  };
  for (const Case& k : cases) {
    Config c = good();
    k.set(c);
    expect_invalid(c, k.fragment, 0);
  }
  Config c = good();
  c.schedule.min_lr_ratio = 1.0;   // closed interval ends are fine
  c.optimizer.beta1 = 0.0;
  c.model.dropout = 0.0;
  EXPECT_NO_THROW(validate(c, 0));
}

TEST(ConfigValidate, HeadArithmetic) {
  Config c = good();
  c.model.d_model = 100;
  c.model.n_head = 12;
  expect_invalid(c, "model.d_model: given 100; valid a multiple of model.n_head (12): 100 % 12 = 4");

  c = good();
  c.model.n_head = 8;
  c.model.n_kv_head = 3;
  expect_invalid(c, "model.n_kv_head: given 3; valid a divisor of model.n_head (8): 8 % 3 = 2");

  c = good();
  c.model.family = Family::llama;
  c.model.d_model = 12;
  c.model.n_head = 4;
  expect_invalid(c, "model.d_model: given 12; valid a head size d_model / n_head that is even for RoPE: 12 / 4 = 3");
}

TEST(ConfigValidate, SeqLenFitsTheModel) {
  Config c = good();
  c.model.max_seq_len = 1024;
  c.data.seq_len = 2048;
  expect_invalid(c, "data.seq_len: given 2048; valid ≤ model.max_seq_len (1024)");
  c.data.seq_len = 1024;
  EXPECT_NO_THROW(validate(c, 8));
}

TEST(ConfigValidate, OrderIsAPermutationOfTheMeshDims) {
  for (const char* bad : {"pp-dp-tp", "pp-dp-fsdp-tp-tp", "pp-dp-dp-tp", "pp,dp,fsdp,tp", "pp-dp-fsdp-tp-", "", "ep-dp-fsdp-tp"}) {
    Config c = good();
    c.parallel.order = bad;
    expect_invalid(c, cat("parallel.order: given '", bad, "'; valid a permutation of pp, dp, fsdp, tp joined by '-'"));
  }
  Config c = good();
  c.parallel.order = "tp-fsdp-dp-pp";
  EXPECT_NO_THROW(validate(c, 8));
}

TEST(ConfigValidate, TensorParallelDividesHeads) {
  Config c = good();
  c.model.n_head = 4;
  c.parallel.tp = 8;
  expect_invalid(c, "parallel.tp: given 8; valid a divisor of model.n_head (4): 4 % 8 = 4");

  c = good();
  c.model.n_head = 8;
  c.model.d_model = 256;
  c.model.n_kv_head = 2;
  c.parallel.tp = 4;
  expect_invalid(c, "parallel.tp: given 4; valid a divisor of model.n_kv_head (2): 2 % 4 = 2");
}

TEST(ConfigValidate, TensorParallelSplitsTheMlpVocabularyAndSequences) {
  Config c = good();
  c.model.d_ff = 102;
  c.parallel.tp = 4;
  expect_invalid(c, "parallel.tp: given 4; valid a divisor of model.d_ff (102): 102 % 4 = 2");

  c = good();
  c.model.vocab_size = 2;
  c.parallel.tp = 4;
  expect_invalid(c, "parallel.tp: given 4; valid at most model.vocab_size (2)");

  c = good();
  c.model.dropout = 0.1;
  c.parallel.tp = 2;
  expect_invalid(c, "model.dropout: given 0.1 with parallel.tp 2; valid 0");

  c = good();
  c.parallel.tp = 4;
  c.parallel.sequence_parallel = true;
  c.data.seq_len = 30;
  expect_invalid(c, "parallel.tp: given 4; valid a divisor of data.seq_len (30): 30 % 4 = 2");
  c.parallel.sequence_parallel = false;
  validate(c, 8);  // without sequence parallelism a sequence is not split
}

TEST(ConfigValidate, WorldSizeArithmetic) {
  Config c = good();
  c.parallel.dp = 2;
  c.parallel.tp = 4;
  expect_invalid(c, "cfg.yaml: parallel: dp(2) × fsdp(1) × tp(4) × pp(1) = 8 ≠ world size 6", 6);
  EXPECT_NO_THROW(validate(c, 8));
  EXPECT_NO_THROW(validate(c, 0));  // world size unknown: skipped

  c = good();
  c.parallel.tp = 4;  // dp = 0: derived
  expect_invalid(c, "cfg.yaml: parallel: world size 6 is not divisible by pp(1) × fsdp(1) × tp(4) = 4", 6);
  EXPECT_NO_THROW(validate(c, 8));
  EXPECT_NO_THROW(validate(c, 4));
}

TEST(ConfigValidate, FirstBrokenRuleIsReported) {
  Config c = good();
  c.model.n_layer = 0;        // model comes before optimizer in table order
  c.optimizer.lr = -1;
  c.parallel.tp = 3;          // cross-field rules come after per-field ones
  expect_invalid(c, "model.n_layer: given 0");
}

TEST(ConfigResolve, FillsDerivedValues) {
  Config c = good();
  c.parallel.tp = 2;
  c.train.out_dir = "runs/a";
  resolve(c, 8);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.model.n_kv_head, c.model.n_head);
  EXPECT_EQ(c.model.d_ff, 4 * 256);
  EXPECT_EQ(c.data.seq_len, 256);
  EXPECT_EQ(c.checkpoint.dir, "runs/a/checkpoints");
  EXPECT_EQ(c.logging.metrics, "runs/a/metrics.jsonl");

  // Given values are kept.
  Config d = good();
  d.parallel.dp = 1;
  d.data.seq_len = 128;
  d.model.d_ff = 1000;
  d.checkpoint.dir = "/ckpt";
  d.logging.metrics = "m.jsonl";
  resolve(d, 8);
  EXPECT_EQ(d.parallel.dp, 1);
  EXPECT_EQ(d.data.seq_len, 128);
  EXPECT_EQ(d.model.d_ff, 1000);
  EXPECT_EQ(d.checkpoint.dir, "/ckpt");
  EXPECT_EQ(d.logging.metrics, "m.jsonl");
}

TEST(ConfigResolve, LlamaFeedForwardRoundsUpTo256) {
  Config c = good();
  c.model.family = Family::llama;
  c.model.d_model = 4096;  // int(8 × 4096 / 3) = 10922 → 11008, the Llama-2 7B value
  resolve(c, 1);
  EXPECT_EQ(c.model.d_ff, 11008);
  c = good();
  c.model.family = Family::llama;
  c.model.d_model = 384;  // 1024 exactly
  resolve(c, 1);
  EXPECT_EQ(c.model.d_ff, 1024);
  // A preset's d_ff (not the rule's 5632) survives.
  c = good();
  apply_model_preset("llama3.2-1b", c.model);
  resolve(c, 1);
  EXPECT_EQ(c.model.d_ff, 8192);
}

TEST(ConfigResolve, LeavesWhatItCannotDerive) {
  Config c = good();
  c.parallel.tp = 4;
  resolve(c, 6);  // 6 % 4 ≠ 0: dp stays 0 for validate() to report
  EXPECT_EQ(c.parallel.dp, 0);
  resolve(c, 0);
  EXPECT_EQ(c.parallel.dp, 0);
  c.parallel.tp = 0;  // invalid, but no division by zero
  resolve(c, 8);
  EXPECT_EQ(c.parallel.dp, 0);
}

// Pipeline keys: micro-batches divide the batch (the arithmetic in the message), interleaving needs chunks and
// m a multiple of pp, the stages need blocks, generation cannot be split over stages; tied embeddings can.
TEST(ConfigValidate, PipelineRules) {
  auto pipeline = [] {
    Config c = good();
    c.model.tie_embeddings = false;
    c.model.n_layer = 8;
    c.parallel.pp = 2;
    return c;
  };
  Config c = pipeline();
  EXPECT_NO_THROW(validate(c, 8));
  c.parallel.pp_microbatches = 3;
  expect_invalid(c, "parallel.pp_microbatches: given 3; valid a divisor of the batch train.micro_batch_size(8) × "
                    "train.grad_accum(1) = 8: 8 % 3 = 2");
  c = pipeline();
  c.parallel.pp_schedule = PipelineKind::interleaved_1f1b;
  c.parallel.pp_microbatches = 2;
  c.parallel.pp = 4;
  expect_invalid(c, "parallel.pp_microbatches: given 2 with interleaved-1f1b; valid a multiple of pp(4): 2 % 4 = 2");
  c = pipeline();
  c.parallel.pp_virtual_stages = 2;
  expect_invalid(c, "parallel.pp_virtual_stages: given 2 with pp_schedule 1f1b; valid 1 (or 0)");
  c = pipeline();
  c.model.tie_embeddings = true;  // the last stage holds a copy of the embedding (docs/pipeline.md)
  EXPECT_NO_THROW(validate(c, 8));
  c = pipeline();
  c.parallel.pp = 8;
  c.parallel.pp_schedule = PipelineKind::interleaved_1f1b;
  expect_invalid(c, "parallel.pp: given 8 × pp_virtual_stages 2 = 16 stages; valid at most model.n_layer (8)");
  c = pipeline();
  c.train.sample_tokens = 10;
  expect_invalid(c, "train.sample_tokens: given 10 with parallel.pp 2; valid 0");
  c = pipeline();
  c.parallel.pp = 4;
  c.parallel.pp_first_stage_blocks = 4;
  c.parallel.pp_last_stage_blocks = 3;
  expect_invalid(c, "first 4 + last 3 blocks leave 1 of model.n_layer 8 for 2 other stages; valid at least one "
                    "block each");
}

TEST(ConfigResolve, PipelineMicroBatchesDefaultToAtLeastTwicePp) {
  Config c = good();
  c.parallel.pp = 2;
  c.train.micro_batch_size = 6;
  resolve(c, 8);
  EXPECT_EQ(c.parallel.pp_microbatches, 6);  // the smallest divisor of 6 that is ≥ 4
  EXPECT_EQ(c.parallel.pp_virtual_stages, 1);
  Config i = good();
  i.parallel.pp = 2;
  i.parallel.pp_schedule = PipelineKind::interleaved_1f1b;
  resolve(i, 8);
  EXPECT_EQ(i.parallel.pp_microbatches, 4);
  EXPECT_EQ(i.parallel.pp_virtual_stages, 2);
}

TEST(ConfigValidate, NcclEnvNamesAreNcclsOwn) {
  Config c;
  c.data.train = {"x.bin"};
  c.comm.nccl_env = "NCCL_IB_HCA=mlx5 NCCL_NET_GDR_LEVEL=PHB NCCL_CROSS_NIC=1";
  validate(c, 1);
  const auto env = parse_nccl_env(c.comm.nccl_env, "comm.nccl_env");
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(env.at("NCCL_NET_GDR_LEVEL"), "PHB");
  c.comm.nccl_env = "NCCL_IB_HCAS=mlx5";
  const std::string msg = testing_support::user_error([&] { validate(c, 1); });
  EXPECT_NE(msg.find("comm.nccl_env: unknown NCCL variable 'NCCL_IB_HCAS'; did you mean 'NCCL_IB_HCA'?"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("valid: NCCL_ALGO, "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  c.comm.nccl_env = "NCCL_DEBUG";
  EXPECT_NE(testing_support::user_error([&] { validate(c, 1); }).find("'NCCL_DEBUG' is not NAME=VALUE"), std::string::npos);
  c.comm.nccl_env = "NCCL_DEBUG=INFO NCCL_DEBUG=WARN";
  EXPECT_NE(testing_support::user_error([&] { validate(c, 1); }).find("NCCL_DEBUG is given twice"), std::string::npos);
}

TEST(ConfigValidate, Lora) {
  auto lora = [] {
    Config c = good();
    c.model.family = Family::llama;
    c.model.lora_rank = 8;
    return c;
  };
  EXPECT_NO_THROW(validate(lora(), 8));
  Config c = lora();
  c.model.lora_rank = -1;
  expect_invalid(c, "model.lora_rank: given -1; valid > 0 (the adapters' rank) or 0 (LoRA off)");
  c = lora();
  c.model.family = Family::gpt2;
  expect_invalid(c, "model.lora_rank: given 8 with model.family 'gpt2'; valid LoRA on family llama only");
  c = lora();
  c.parallel.tp = 2;  // the adapters split with their column-/row-parallel layers (docs/lora.md)
  EXPECT_NO_THROW(validate(c, 8));
  c = lora();
  c.model.lora_alpha = 0;
  expect_invalid(c, "model.lora_alpha: given 0; valid > 0");
  c = lora();
  c.model.lora_dropout = 1.0;
  expect_invalid(c, "model.lora_dropout: given 1; valid 0 ≤ p < 1");
  c = lora();
  c.model.lora_targets = {"q", "proj"};
  expect_invalid(c, "model.lora_targets: given [q, proj] ('proj' is no projection); valid projections among "
                    "q | k | v | o | gate | up | down");
  c.model.lora_targets = {"q", "v", "q"};
  expect_invalid(c, "model.lora_targets: given [q, v, q] ('q' twice)");
  c.model.lora_targets = {"q", ""};
  expect_invalid(c, "model.lora_targets: given [q, ] ('' is no projection)");
  c.model.lora_targets = {};
  expect_invalid(c, "model.lora_targets: given [] with model.lora_rank 8");
  c.model.lora_rank = 0;  // off: the targets are not read
  EXPECT_NO_THROW(validate(c, 8));
  EXPECT_TRUE(lora_targets(c.model).empty());
  c = lora();
  c.model.lora_targets = {"v", "down"};
  EXPECT_EQ(lora_targets(c.model), (std::vector<LoraTarget>{LoraTarget::v, LoraTarget::down}));
}

// model.base_quant nf4 (QLoRA): only over a frozen LoRA base, and not yet with tensor or pipeline parallelism.
TEST(ConfigValidate, BaseQuantNeedsLoraAndNoTpOrPp) {
  Config c = good();
  c.model.family = Family::llama;
  c.model.base_quant = BaseQuant::nf4;
  expect_invalid(c, "model.base_quant: given nf4 with model.lora_rank 0; valid none, or nf4 with model.lora_rank > 0");
  c.model.lora_rank = 8;
  EXPECT_NO_THROW(validate(c, 8));
  c.parallel.fsdp = 2;  // the NF4 base is no parameter: every rank holds it whole beside FSDP's shards
  EXPECT_NO_THROW(validate(c, 8));
  c.parallel.fsdp = 1;
  c.parallel.tp = 2;
  expect_invalid(c, "model.base_quant: given nf4 with parallel.tp 2; valid nf4 with tp 1 and pp 1");
  c.parallel.tp = 1;
  c.parallel.pp = 2;
  expect_invalid(c, "model.base_quant: given nf4 with parallel.pp 2; valid nf4 with tp 1 and pp 1");
  c.parallel.pp = 1;
  c.model.lora_rank = 0;
  c.model.base_quant = BaseQuant::none;
  EXPECT_NO_THROW(validate(c, 8));
}

// model.lora_rank at most min(in, out) of every adapted projection, refused at validate time with the limit
// (not accepted, nor an allocator's trace when the model is built).
TEST(ConfigValidate, LoraRankAtMostTheSmallestAdaptedSide) {
  Config c = good();
  c.model.family = Family::llama;
  c.model.d_model = 64;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;  // k and v: 2 heads × 16 = 32 outputs
  c.model.lora_rank = 32;
  EXPECT_NO_THROW(validate(c, 8));
  c.model.lora_rank = 33;
  expect_invalid(c, "model.lora_rank: given 33; valid 1 to 32: at most min(in, out) of every adapted projection "
                    "(k is the smallest, with model.d_model 64)");
  c.model.lora_rank = 100000;
  expect_invalid(c, "model.lora_rank: given 100000; valid 1 to 32");
  c.model.lora_rank = int64_t{1} << 40;
  expect_invalid(c, "model.lora_rank: given 1099511627776; valid 1 to 32");
  c.model.lora_targets = {"q", "o"};  // D × D only
  c.model.lora_rank = 64;
  EXPECT_NO_THROW(validate(c, 8));
  c.model.lora_rank = 65;
  expect_invalid(c, "model.lora_rank: given 65; valid 1 to 64");
  c.model.lora_targets = {"q", "down"};
  c.model.d_ff = 16;  // a given d_ff below d_model is the smaller side of the MLP's projections
  c.model.lora_rank = 17;
  expect_invalid(c, "model.lora_rank: given 17; valid 1 to 16: at most min(in, out) of every adapted projection "
                    "(down is the smallest, with model.d_model 64, model.d_ff 16)");
}

// train.freeze: globs, none empty.
TEST(ConfigValidate, FreezeGlobsAreNotEmpty) {
  Config c = good();
  c.train.freeze = {"blocks.0.*", "tok_embed.weight"};
  EXPECT_NO_THROW(validate(c, 8));
  c.train.freeze = {"blocks.0.*", ""};
  expect_invalid(c, "train.freeze: given [blocks.0.*, ]; valid globs over parameter names, none empty");
}

// optimizer.offload_delay: 0 or 1, and 1 only where there is a host update to delay.
TEST(ConfigValidate, OffloadDelay) {
  Config c = good();
  c.optimizer.offload = OptimizerOffload::cpu;
  c.optimizer.offload_delay = 1;
  EXPECT_NO_THROW(validate(c, 8));
  c.optimizer.offload_delay = 2;
  expect_invalid(c, "optimizer.offload_delay: given 2; valid 0 | 1");
  c.optimizer.offload_delay = -1;
  expect_invalid(c, "optimizer.offload_delay: given -1; valid 0 | 1");
  c = good();
  c.optimizer.offload_delay = 1;
  expect_invalid(c, "optimizer.offload_delay: given 1 with optimizer.offload 'none'; valid 0, or 1 with "
                    "optimizer.offload cpu");
}
