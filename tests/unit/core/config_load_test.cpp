// Loading configs: YAML and JSON give the same struct, presets apply before file keys and overrides, and every
// kind of user mistake (malformed text, unknown key, wrong type, bad override, bad file) is one clear line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;

namespace {

#define EXPECT_ERROR(stmt, fragment)                                                      \
  do {                                                                                    \
    std::string msg_ = testing_support::user_error([&] { stmt; });                                           \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_;            \
  } while (0)

Config yaml(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_config(text, "cfg.yaml", false, sets);
}
Config json(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_config(text, "cfg.json", true, sets);
}

const char* kYaml = R"(
model:
  family: llama
  n_layer: 6
  n_head: 8
  n_kv_head: 2
  d_model: 512
  tie_embeddings: false
  norm_eps: 1e-6
parallel:
  tp: 2
  order: dp-pp-tp-fsdp
data:
  train: data/train_*.bin
  val: ""
optimizer:
  lr: 3e-4
  beta2: 0.99
train:
  steps: 50
  sample_prompt: "Once upon a time: "
checkpoint:
  resume: auto
logging:
  all_ranks: true
)";

const char* kJson = R"({
  "model": {"family": "llama", "n_layer": 6, "n_head": 8, "n_kv_head": 2, "d_model": 512,
            "tie_embeddings": false, "norm_eps": 1e-6},
  "parallel": {"tp": 2, "order": "dp-pp-tp-fsdp"},
  "data": {"train": "data/train_*.bin", "val": null},
  "optimizer": {"lr": 0.0003, "beta2": 0.99},
  "train": {"steps": 50, "sample_prompt": "Once upon a time: "},
  "checkpoint": {"resume": "auto"},
  "logging": {"all_ranks": true}
})";

}  // namespace

TEST(ConfigLoad, YamlAndJsonOfTheSameConfigAreEqual) {
  Config a = yaml(kYaml), b = json(kJson);
  EXPECT_EQ(a.model.family, Family::llama);
  EXPECT_EQ(a.model.n_kv_head, 2);
  EXPECT_EQ(a.model.norm_eps, 1e-6);
  EXPECT_FALSE(a.model.tie_embeddings);
  EXPECT_EQ(a.parallel.order, "dp-pp-tp-fsdp");
  EXPECT_EQ(a.data.train, StringList{"data/train_*.bin"});
  EXPECT_EQ(a.optimizer.lr, 3e-4);
  EXPECT_EQ(a.train.sample_prompt, "Once upon a time: ");
  EXPECT_TRUE(a.logging.all_ranks);
  EXPECT_EQ(a.source, "cfg.yaml");
  b.source = a.source;
  EXPECT_EQ(a, b);
}

TEST(ConfigLoad, UnsetKeysKeepTheirDefaults) {
  Config c = yaml("data:\n  train: x.bin\n");
  Config d;
  d.data.train = {"x.bin"};
  d.source = "cfg.yaml";
  EXPECT_EQ(c, d);
  EXPECT_EQ(yaml("").optimizer.lr, 3e-4);                // empty file: all defaults
  EXPECT_EQ(yaml("model:\n").model.n_layer, 4);          // empty section
}

TEST(ConfigLoad, UnknownKeySuggestsTheNearest) {
  EXPECT_ERROR(yaml("optimizer:\n  lrr: 1\n"), "cfg.yaml:2:3: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  EXPECT_ERROR(yaml("model:\n  n_layers: 2\n"), "did you mean 'model.n_layer'?");
  EXPECT_ERROR(yaml("schedule:\n  warmup: 2\n"), "did you mean 'schedule.warmup_steps'?");
  EXPECT_ERROR(json(R"({"optimizer": {"betta1": 0.9}})"),
               "cfg.json: unknown key 'optimizer.betta1'; did you mean 'optimizer.beta1'?");
  // The right key in the wrong section.
  EXPECT_ERROR(yaml("train:\n  lr: 1\n"), "unknown key 'train.lr'; did you mean 'optimizer.lr'?");
  // Nothing close: the section's keys are listed.
  EXPECT_ERROR(yaml("optimizer:\n  momentum: 1\n"),
               "unknown key 'optimizer.momentum'; valid keys of 'optimizer': name, lr, beta1, beta2, eps, "
               "weight_decay, grad_clip");
}

TEST(ConfigLoad, UnknownSectionSuggestsTheNearest) {
  EXPECT_ERROR(yaml("optimiser:\n  lr: 1\n"), "cfg.yaml:1:1: unknown section 'optimiser'; did you mean 'optimizer'?");
  EXPECT_ERROR(json(R"({"zzz": {}})"),
               "cfg.json: unknown section 'zzz'; valid sections: model, parallel, comm, data, optimizer, "
               "schedule, train, checkpoint, logging, serve");
}

TEST(ConfigLoad, StructureMustBeMappings) {
  EXPECT_ERROR(yaml("- a\n- b\n"), "cfg.yaml:1:1: expected a mapping of sections (model, parallel");
  EXPECT_ERROR(yaml("model: 3\n"), "cfg.yaml:1:8: model: expected a mapping of keys, got '3'");
  EXPECT_ERROR(json("[1]"), "cfg.json: expected an object of sections");
  EXPECT_ERROR(json(R"({"model": 3})"), "cfg.json: model: expected an object of keys, got 3");
}

TEST(ConfigLoad, DuplicateKeysAreRefused) {
  EXPECT_ERROR(yaml("optimizer:\n  lr: 1\n  lr: 2\n"), "cfg.yaml:3:3: duplicate key 'optimizer.lr' (first at line 2)");
  EXPECT_ERROR(yaml("train:\n  steps: 1\ntrain:\n  seed: 2\n"), "cfg.yaml:3:1: duplicate section 'train'");
  EXPECT_ERROR(json(R"({"optimizer": {"lr": 1, "lr": 2}})"), "cfg.json: duplicate key 'optimizer.lr'");
}

TEST(ConfigLoad, WrongTypesNameKeyExpectedAndGiven) {
  EXPECT_ERROR(yaml("optimizer:\n  lr: abc\n"), "cfg.yaml:2:7: optimizer.lr: expected a finite number, got 'abc'");
  EXPECT_ERROR(yaml("model:\n  n_layer: 2.5\n"), "cfg.yaml:2:12: model.n_layer: expected an integer, got '2.5'");
  EXPECT_ERROR(yaml("model:\n  n_layer: 1e3\n"), "model.n_layer: expected an integer, got '1e3'");
  EXPECT_ERROR(yaml("model:\n  tie_embeddings: yes\n"), "model.tie_embeddings: expected true or false, got 'yes'");
  EXPECT_ERROR(yaml("data:\n  val: {a: b}\n"), "cfg.yaml:2:8: data.val: expected a list of strings (a sequence, or one comma-separated string), got a mapping");
  EXPECT_ERROR(yaml("optimizer:\n  lr:\n  beta1: 0.9\n"), "cfg.yaml:2:3: optimizer.lr: expected a finite number, got null");
  EXPECT_ERROR(json(R"({"optimizer": {"lr": "3e-4"}})"), "cfg.json: optimizer.lr: expected a finite number, got '3e-4'");
  EXPECT_ERROR(json(R"({"model": {"n_layer": 8.0}})"), "model.n_layer: expected an integer, got 8.0");
  EXPECT_ERROR(json(R"({"model": {"tie_embeddings": 1}})"), "model.tie_embeddings: expected true or false, got 1");
  EXPECT_ERROR(json(R"({"data": {"train": 7}})"), "data.train: expected a list of strings (a sequence, or one comma-separated string), got 7");
  // Scalars convert by the key's type: a quoted number is a number, a number is a string where one is wanted.
  EXPECT_EQ(yaml("optimizer:\n  lr: \"1e-3\"\n").optimizer.lr, 1e-3);
  EXPECT_EQ(yaml("train:\n  sample_prompt: 123\n").train.sample_prompt, "123");
  EXPECT_EQ(yaml("model:\n  n_layer: +3\n").model.n_layer, 3);
  EXPECT_EQ(yaml("train:\n  sample_prompt: ~\n").train.sample_prompt, "");
}

TEST(ConfigLoad, MalformedYamlHasLineAndColumn) {
  // An unterminated flow sequence; yaml-cpp's marks are 0-based, ours 1-based.
  std::string msg = testing_support::user_error([] { yaml("model:\n  n_layer: 2\n  n_head: [1, 2\n"); });
  EXPECT_EQ(msg.rfind("cfg.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("cfg.yaml:4:1: end of sequence flow not found"), std::string::npos) << msg;
  EXPECT_ERROR(yaml("model:\n  n_layer: 2\n n_head: 4\n"), "cfg.yaml:3:");
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

TEST(ConfigLoad, InfinityAndNanAreNotNumbers) {
  // Every spelling, in the file and in --set, for every kind of number field.
  for (const char* v : {"inf", "-inf", "nan", "INF", "infinity", ".inf", ".nan", "1e999"}) {
    EXPECT_ERROR(yaml(cat("optimizer:\n  lr: ", v, "\n")), cat("optimizer.lr: expected a finite number, got '", v, "'"));
    EXPECT_ERROR(yaml("", {cat("model.norm_eps=", v)}), cat("--set model.norm_eps=", v, ": model.norm_eps: expected a finite number"));
  }
  for (const char* key : {"optimizer.eps", "optimizer.weight_decay", "optimizer.grad_clip", "parallel.bucket_first_mb"})
    EXPECT_ERROR(yaml("", {cat(key, "=inf")}), cat(key, ": expected a finite number, got 'inf'"));
  EXPECT_ERROR(json(R"({"optimizer": {"lr": 1e999}})"), "cfg.json: number overflow parsing '1e999'; valid: finite");
}

TEST(ConfigLoad, ASecondYamlDocumentIsRefused) {
  EXPECT_ERROR(yaml("train:\n  steps: 5\n---\noptimizer:\n  lr: 1e-3\n"),
               "cfg.yaml:4:1: a second YAML document (after '---'); a config is one document");
  // A leading '---' and a trailing empty document lose nothing.
  EXPECT_EQ(yaml("---\ntrain:\n  steps: 5\n").train.steps, 5);
  EXPECT_EQ(yaml("train:\n  steps: 5\n---\n").train.steps, 5);
}

TEST(ConfigLoad, DeepNestingSaysWhy) {
  std::string deep(3000, '[');
  std::string msg = testing_support::user_error([&] { yaml(deep); });
  EXPECT_EQ(msg.rfind("cfg.yaml:1:", 0), 0u) << msg;
  EXPECT_NE(msg.find("levels deep, beyond the YAML parser's limit; a config has two levels"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("bad file"), std::string::npos) << msg;
}

TEST(ConfigLoad, MalformedJsonHasLineAndColumn) {
  // Missing ':' after "lr" on line 3, column 11 (the offending '1').
  EXPECT_ERROR(json("{\n  \"optimizer\": {\n    \"lr\" 1}\n}"), "cfg.json:3:10: syntax error while parsing object separator");
  // nlohmann stops at the end of the bad token; the column is where it stopped (as in its own message).
  EXPECT_ERROR(json("{\"a\": tru}"), "cfg.json:1:10: syntax error while parsing value - invalid literal");
  // Empty input: the wording differs between nlohmann 3.11.2 ("syntax error …") and 3.11.3 ("attempting to
  // parse an empty input …"); the position is what we add.
  EXPECT_ERROR(json(""), "cfg.json:1:1: ");
  // Comments are allowed in JSON configs.
  EXPECT_EQ(json("{// c\n\"train\": {\"steps\": 5} /* x */}").train.steps, 5);
}

TEST(ConfigLoad, PresetAppliesBeforeFileKeys) {
  Config c = yaml("model:\n  n_layer: 3\n  preset: gpt2-124m\n");  // order inside the file does not matter
  EXPECT_EQ(c.model.preset, "gpt2-124m");
  EXPECT_EQ(c.model.n_layer, 3);          // the file wins
  EXPECT_EQ(c.model.d_model, 768);        // the preset fills the rest
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.max_seq_len, 1024);
}

TEST(ConfigLoad, PresetFromOverrideStillLosesToFileKeys) {
  Config c = yaml("model:\n  n_layer: 3\n", {"model.preset=llama3.1-8b"});
  EXPECT_EQ(c.model.preset, "llama3.1-8b");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.d_ff, 14336);
  // An override preset beats the file's preset; overrides of model keys beat both.
  c = yaml("model:\n  preset: tiny\n", {"model.preset=gpt2-350m", "model.n_head=8"});
  EXPECT_EQ(c.model.preset, "gpt2-350m");
  EXPECT_EQ(c.model.d_model, 1024);
  EXPECT_EQ(c.model.n_head, 8);
}

TEST(ConfigLoad, UnknownPresetNamesTheValidOnes) {
  EXPECT_ERROR(yaml("model:\n  preset: gpt2-125m\n"),
               "cfg.yaml:2:11: model.preset: given 'gpt2-125m'; valid tiny | gpt2-124m | gpt2-350m | gpt2-774m | "
               "gpt2-1.5b | llama3.2-1b | llama3.2-3b | llama3.1-8b | llama3.1-70b (did you mean 'gpt2-124m'?)");
  EXPECT_ERROR(yaml("", {"model.preset=big"}), "--set model.preset=big: model.preset: given 'big'");
}

TEST(ConfigLoad, OverridesParseAsYamlScalars) {
  Config c = yaml(kYaml, {"optimizer.lr=1e-3", "train.steps=7", "logging.all_ranks=false",
                          "train.sample_prompt='a: b'", "data.val=*.bin", "data.train=", "parallel.tp = 4",
                          "train.out_dir=runs/x y"});
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_FALSE(c.logging.all_ranks);
  EXPECT_EQ(c.train.sample_prompt, "a: b");
  EXPECT_EQ(c.data.val, StringList{"*.bin"});  // not a YAML alias: the text as typed
  EXPECT_EQ(c.data.train, StringList{});
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_EQ(c.train.out_dir, "runs/x y");
  // Later overrides win.
  EXPECT_EQ(yaml("", {"train.steps=1", "train.steps=2"}).train.steps, 2);
}

TEST(ConfigLoad, BadOverridesNameTheFlag) {
  EXPECT_ERROR(yaml("", {"optimizer.lr"}), "--set optimizer.lr: expected section.key=value (no '=')");
  EXPECT_ERROR(yaml("", {"lr=1"}), "--set lr=1: expected section.key=value ('lr' has no section); did you mean 'optimizer.lr=1'?");
  EXPECT_ERROR(yaml("", {"optimizer.lrr=1"}), "--set optimizer.lrr=1: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  EXPECT_ERROR(yaml("", {"optimzer.lr=1"}), "--set optimzer.lr=1: unknown section 'optimzer'; did you mean 'optimizer'?");
  EXPECT_ERROR(yaml("", {"optimizer.lr=abc"}), "--set optimizer.lr=abc: optimizer.lr: expected a finite number, got 'abc'");
  EXPECT_ERROR(yaml("", {"train.steps=1.5"}), "--set train.steps=1.5: train.steps: expected an integer, got '1.5'");
  EXPECT_ERROR(yaml("", {"train.steps=[1"}), "train.steps: expected an integer, got '[1'");
  EXPECT_ERROR(yaml("", {"logging.all_ranks=1"}), "logging.all_ranks: expected true or false, got '1'");
}

TEST(ConfigLoad, FilesAreChosenByExtension) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("meshtrain_config_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  std::string y = write("a.yaml", kYaml), j = write("b.JSON", kJson), yml = write("c.yml", "train:\n  steps: 9\n");
  Config a = load_config(y), b = load_config(j);
  EXPECT_EQ(a.source, y);
  b.source = a.source;
  EXPECT_EQ(a, b);
  EXPECT_EQ(load_config(yml, {"train.seed=3"}).train.seed, 3);
  EXPECT_EQ(load_config(yml).train.steps, 9);

  std::string toml = write("d.toml", "");
  EXPECT_ERROR(load_config(toml), toml + ": unsupported config file extension; valid: .yaml, .yml (YAML) or .json (JSON)");
  std::string missing = (dir / "missing.yaml").string();
  EXPECT_ERROR(load_config(missing), missing + ": cannot read config file: No such file or directory");
  fs::create_directories(dir / "sub.yaml");
  EXPECT_ERROR(load_config((dir / "sub.yaml").string()), "sub.yaml: cannot read config file: is a directory");
  std::string bad = write("bad.yaml", "model:\n  n_layer: [\n");
  EXPECT_ERROR(load_config(bad), bad + ":3:1:");
  // Not fs::remove_all: in a binary linked to the torch 2.11 wheel it binds to libtorch.so's copy, which calls a
  // GCC 13 libstdc++ symbol that GCC 12's lacks, and segfaults. We know what we created.
  for (const char* f : {"a.yaml", "b.JSON", "c.yml", "d.toml", "bad.yaml"}) fs::remove(dir / f);
  fs::remove(dir / "sub.yaml");
  fs::remove(dir);
}

// Every config shipped in configs/ loads and passes the rules that do not depend on the world size.
TEST(ConfigLoad, ShippedConfigsLoadAndValidate) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(MESHTRAIN_SOURCE_DIR) / "configs";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no " << dir;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW({
      Config c = load_config(entry.path().string());
      validate(c, 0);
      resolve(c, 1);
      validate(c, 1);
    });
    ++n;
  }
  EXPECT_GT(n, 0);
}

TEST(ConfigLoad, NcclEnvAsStringMappingOrList) {
  EXPECT_EQ(yaml("comm:\n  nccl_env: NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_DEBUG=WARN\n").comm.nccl_env,
            "NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_DEBUG=WARN");
  EXPECT_EQ(yaml("comm:\n  nccl_env:\n    NCCL_SOCKET_IFNAME: eth0\n    NCCL_BUFFSIZE: 8388608\n").comm.nccl_env,
            "NCCL_SOCKET_IFNAME=eth0 NCCL_BUFFSIZE=8388608");
  EXPECT_EQ(yaml("comm:\n  nccl_env: [NCCL_ALGO=Ring, NCCL_PROTO=Simple]\n").comm.nccl_env,
            "NCCL_ALGO=Ring NCCL_PROTO=Simple");
  EXPECT_ERROR(yaml("comm:\n  nccl_env:\n    NCCL_DEBUG: [a]\n"), "comm.nccl_env: expected a string");
  // Other string keys take no mapping.
  EXPECT_ERROR(yaml("train:\n  out_dir: {a: b}\n"), "train.out_dir: expected a string, got a mapping");
  // JSON: the same three forms (an object, an array of NAME=VALUE), as the YAML reader takes them.
  EXPECT_EQ(json(R"({"comm": {"nccl_env": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_BUFFSIZE": 8388608}}})").comm.nccl_env,
            "NCCL_SOCKET_IFNAME=eth0 NCCL_BUFFSIZE=8388608");
  EXPECT_EQ(json(R"({"comm": {"nccl_env": ["NCCL_ALGO=Ring", "NCCL_PROTO=Simple"]}})").comm.nccl_env,
            "NCCL_ALGO=Ring NCCL_PROTO=Simple");
  EXPECT_EQ(json(R"({"comm": {"nccl_env": "NCCL_DEBUG=WARN"}})").comm.nccl_env, "NCCL_DEBUG=WARN");
  EXPECT_ERROR(json(R"({"comm": {"nccl_env": {"NCCL_DEBUG": ["a"]}}})"), "comm.nccl_env: expected a string");
  EXPECT_ERROR(json(R"({"train": {"out_dir": {"a": "b"}}})"), "train.out_dir: expected a string, got an object");
}

// An enumeration's unknown value is refused where it is read, naming the file (line and column) or the --set
// argument, the key, the value and the valid ones (and the nearest, where one is close).
TEST(ConfigLoad, UnknownEnumValueNamesTheValidOnes) {
  EXPECT_ERROR(yaml("model:\n  family: bert\n"), "cfg.yaml:2:11: model.family: given 'bert'; valid gpt2 | llama");
  EXPECT_ERROR(yaml("model:\n  family: lama\n"), "model.family: given 'lama'; valid gpt2 | llama (did you mean 'llama'?)");
  EXPECT_ERROR(json(R"({"data": {"format": "u16"}})"), "cfg.json: data.format: given 'u16'; valid auto | llmc | uint16 | uint32");
  EXPECT_ERROR(json(R"({"train": {"device": 1}})"), "cfg.json: train.device: expected one of auto | cpu | cuda, got 1");
  EXPECT_ERROR(yaml("train:\n  dtype: [bf16]\n"), "train.dtype: expected one of auto | fp32 | bf16, got a sequence");
  EXPECT_ERROR(yaml("", {"schedule.kind=cos"}),
               "--set schedule.kind=cos: schedule.kind: given 'cos'; valid cosine | linear | constant | wsd");
  EXPECT_ERROR(yaml("", {"parallel.backend=gloo"}), "--set parallel.backend=gloo: parallel.backend: given 'gloo'; "
                                                    "valid auto | nccl | cpu");
  EXPECT_ERROR(yaml("", {"logging.level=verbose"}), "valid trace | debug | info | warn | error | off");
  EXPECT_ERROR(yaml("", {"optimizer.name=sgd"}), "optimizer.name: given 'sgd'; valid adamw");
  EXPECT_ERROR(yaml("", {"optimizer.offload=disk"}), "optimizer.offload: given 'disk'; valid none | cpu");
  EXPECT_ERROR(yaml("", {"train.attention_backend=flash2"}),
               "train.attention_backend: given 'flash2'; valid auto | flash | cudnn | efficient | math");
  EXPECT_ERROR(yaml("", {"data.loss_mask=assistant"}), "data.loss_mask: given 'assistant'; valid auto | all");
  // A refused value the enumeration has a note for, and one that is no YAML scalar.
  EXPECT_ERROR(yaml("parallel:\n  master_location: host\n"),
               "parallel.master_location: given 'host'; valid device (the master weights and optimizer state move to "
               "host memory with optimizer.offload: cpu)");
  EXPECT_ERROR(yaml("", {"train.fp8=*e4m3"}), "--set train.fp8=*e4m3: train.fp8: given '*e4m3'; valid off | tensorwise");
}

TEST(ConfigLoad, EnumsRoundTripThroughYamlAndJson) {
  Config c;
  c.source = "cfg.yaml";
  c.model.family = Family::llama;
  c.parallel.pp_schedule = PipelineKind::interleaved_1f1b;
  c.parallel.backend = CommBackend::cpu;
  c.parallel.reduce_dtype = Dtype::bf16;
  c.data.format = ShardFormat::U32;
  c.data.loss_mask = LossMask::all;
  c.optimizer.offload = OptimizerOffload::cpu;
  c.schedule.kind = LrShape::wsd;
  c.train.device = TrainDevice::cuda;
  c.train.dtype = ComputeDtype::fp32;
  c.train.attention_backend = AttentionBackend::efficient;
  c.train.fp8 = Fp8Scaling::rowwise;
  c.train.cuda_graph = OnOff::on;
  c.logging.level = LogLevel::warn;
  const std::string y = to_yaml(c);
  EXPECT_NE(y.find("  pp_schedule: interleaved-1f1b\n"), std::string::npos) << y;
  EXPECT_NE(y.find("  cuda_graph: on\n"), std::string::npos) << y;
  EXPECT_EQ(yaml(y), c);
  const std::string j = to_json(c);
  EXPECT_NE(j.find("\"family\": \"llama\""), std::string::npos) << j;
  EXPECT_EQ(json(j).model, c.model);
  Config back = json(j);
  back.source = c.source;
  EXPECT_EQ(back, c);
  EXPECT_EQ(yaml("", {"parallel.pp_schedule=zb-h1"}).parallel.pp_schedule, PipelineKind::zb_h1);
}

// train.freeze and model.lora_targets: a YAML sequence (block or flow), a JSON array, or the one
// comma-separated string older configs hold, in files and --set alike.
TEST(ConfigLoad, ListsFromSequencesAndCommaStrings) {
  const StringList freeze = {"blocks.0.*", "tok_embed.weight"};
  EXPECT_EQ(yaml("train:\n  freeze:\n    - blocks.0.*\n    - tok_embed.weight\n").train.freeze, freeze);
  EXPECT_EQ(yaml("train:\n  freeze: [blocks.0.*, tok_embed.weight]\n").train.freeze, freeze);
  EXPECT_EQ(yaml("train:\n  freeze: blocks.0.*, tok_embed.weight\n").train.freeze, freeze);
  EXPECT_EQ(yaml("train:\n  freeze:\n").train.freeze, StringList{});
  EXPECT_EQ(yaml("train:\n  freeze: []\n").train.freeze, StringList{});
  EXPECT_EQ(json(R"({"train": {"freeze": ["blocks.0.*", "tok_embed.weight"]}})").train.freeze, freeze);
  EXPECT_EQ(json(R"({"train": {"freeze": "blocks.0.*,tok_embed.weight"}})").train.freeze, freeze);
  EXPECT_EQ(json(R"({"train": {"freeze": ""}})").train.freeze, StringList{});
  EXPECT_EQ(yaml("", {"train.freeze=blocks.0.*,tok_embed.weight"}).train.freeze, freeze);
  EXPECT_EQ(yaml("", {"train.freeze=[blocks.0.*, tok_embed.weight]"}).train.freeze, freeze);
  EXPECT_EQ(yaml("", {"train.freeze=*.bias"}).train.freeze, StringList{"*.bias"});  // no plain YAML scalar
  EXPECT_EQ(yaml("", {"train.freeze="}).train.freeze, StringList{});
  EXPECT_EQ(yaml("", {"model.lora_targets=q,v"}).model.lora_targets, (StringList{"q", "v"}));
  EXPECT_EQ(yaml("model:\n  lora_targets: [q, v, down]\n").model.lora_targets, (StringList{"q", "v", "down"}));
  EXPECT_EQ(Config{}.model.lora_targets, (StringList{"q", "k", "v", "o", "gate", "up", "down"}));
  // PEFT's target_modules names, as a YAML flow list from --set: the same projections.
  Config peft = yaml("model:\n  family: llama\n  lora_rank: 4\n", {"model.lora_targets=[q_proj,v_proj]"});
  EXPECT_EQ(peft.model.lora_targets, (StringList{"q_proj", "v_proj"}));
  EXPECT_EQ(lora_targets(peft.model), (std::vector<LoraTarget>{LoraTarget::q, LoraTarget::v}));
  // Text that opens a flow list but is none is refused, never split at its commas with the brackets kept.
  EXPECT_ERROR(yaml("", {"train.freeze=[a, b"}), "--set train.freeze=[a, b: train.freeze: not a YAML flow list (");
  EXPECT_ERROR(yaml("", {"train.freeze=[blocks.0.*?, b]"}), "not a YAML flow list");
  EXPECT_EQ(yaml("", {"train.freeze=['blocks.0.*?', 'a: b']"}).train.freeze, (StringList{"blocks.0.*?", "a: b"}));
  // Items are strings; anything else is a wrong type.
  EXPECT_ERROR(yaml("train:\n  freeze: [[a]]\n"), "train.freeze: expected a list of strings (a sequence, or one "
                                                   "comma-separated string), got a sequence holding a sequence");
  EXPECT_ERROR(json(R"({"train": {"freeze": [1]}})"), "cfg.json: train.freeze: expected a list of strings");
  EXPECT_ERROR(json(R"({"train": {"freeze": {"a": 1}}})"), "got an object");
  // An empty item survives loading for validate() to name with the file.
  Config c = yaml("data:\n  train: x.bin\ntrain:\n  freeze: a.*,\n");
  EXPECT_EQ(c.train.freeze, (StringList{"a.*", ""}));
  EXPECT_NE(testing_support::user_error([&] { validate(c, 1); }).find("cfg.yaml: train.freeze: given [a.*, ]"),
            std::string::npos);
}

// Checkpoints store to_json(cfg) in meta.json and read it back: those written before lists had a type of
// their own hold them as comma-separated strings, and still load.
TEST(ConfigLoad, OldCheckpointConfigWithCommaStringListsLoads) {
  const char* old_meta_config = R"({
    "model": {"preset": "", "family": "llama", "n_layer": 2, "n_head": 4, "d_model": 64, "lora_rank": 8,
              "lora_alpha": 16.0, "lora_targets": "q,k,v,o,gate,up,down"},
    "parallel": {"pp_schedule": "1f1b", "backend": "auto", "param_dtype": "fp32", "master_location": "device"},
    "data": {"train": "data/*.bin", "format": "auto", "loss_mask": "auto"},
    "optimizer": {"name": "adamw", "offload": "none"},
    "schedule": {"kind": "cosine"},
    "train": {"device": "auto", "dtype": "auto", "freeze": "", "attention_backend": "auto", "fp8": "off",
              "cuda_graph": "off"},
    "logging": {"level": "info"}
  })";
  Config c = parse_config(old_meta_config, "runs/x/checkpoints/step_10/meta.json", true);
  EXPECT_EQ(c.model.lora_targets, (StringList{"q", "k", "v", "o", "gate", "up", "down"}));
  EXPECT_EQ(c.train.freeze, StringList{});
  EXPECT_EQ(c.model.family, Family::llama);
  EXPECT_NO_THROW(validate(c, 1));
  EXPECT_EQ(lora_targets(c.model).size(), 7u);
  // What a checkpoint writes now (arrays) reads back to the same config.
  Config back = parse_config(to_json(c), c.source, true);
  EXPECT_EQ(back, c);
  EXPECT_NE(to_json(c).find("\"freeze\": []"), std::string::npos);
}
