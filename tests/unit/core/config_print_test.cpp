// to_yaml / to_json (every field, table order, doubles that read back exactly, round trips), the reflection
// table itself, the model presets, and docs/config.md being the generated reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;

namespace {

// A config with awkward values: doubles without a short decimal form, strings that need quoting.
Config awkward() {
  Config c;
  c.source = "x.yaml";
  apply_model_preset("llama3.2-3b", c.model);
  c.model.norm_eps = 1e-6;
  c.model.dropout = 0.1;
  c.optimizer.lr = 3e-4;
  c.optimizer.eps = 1.0 / 3.0;
  c.optimizer.weight_decay = 1e-10;
  c.parallel.bucket_mb = 1e20;
  c.data.train = {"*.bin"};
  c.data.val = {"val: \"quoted\" #not a comment"};
  c.train.sample_prompt = "true";
  c.train.out_dir = "123";
  c.checkpoint.resume = "null";
  c.logging.metrics = "- dash";
  c.parallel.pp_schedule = PipelineKind::zb_h1;   // spellings an identifier cannot hold
  c.train.cuda_graph = OnOff::on;                 // YAML 1.1 would read a plain `on` as a bool
  c.logging.level = LogLevel::off;
  c.train.freeze = {"blocks.0.*", "a,b", "true", ""};  // items that need quoting, one holding a comma
  c.model.lora_targets = {"q", "v"};
  return c;
}

}  // namespace

TEST(ConfigSchema, TableFollowsTheStructs) {
  EXPECT_EQ(config_sections(), (std::vector<std::string>{"model", "parallel", "comm", "data", "optimizer", "schedule",
                                                         "train", "checkpoint", "logging", "serve"}));
#define MT_COUNT_FIELD(...) +1
  constexpr size_t kDeclared = 0 MT_MODEL_FIELDS(MT_COUNT_FIELD) MT_PARALLEL_FIELDS(MT_COUNT_FIELD)
      MT_COMM_FIELDS(MT_COUNT_FIELD) MT_DATA_FIELDS(MT_COUNT_FIELD) MT_OPTIMIZER_FIELDS(MT_COUNT_FIELD) MT_SCHEDULE_FIELDS(MT_COUNT_FIELD)
          MT_TRAIN_FIELDS(MT_COUNT_FIELD) MT_CHECKPOINT_FIELDS(MT_COUNT_FIELD) MT_LOGGING_FIELDS(MT_COUNT_FIELD)
              MT_SERVE_FIELDS(MT_COUNT_FIELD);
#undef MT_COUNT_FIELD
  EXPECT_EQ(config_fields().size(), kDeclared);
  EXPECT_GE(kDeclared, 58u);
  EXPECT_EQ(config_fields().front().path(), "model.preset");
  EXPECT_EQ(config_fields().back().path(), "serve.drain_timeout_s");
  const FieldInfo* lr = find_config_field("optimizer", "lr");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->type, FieldType::Double);
  EXPECT_EQ(std::get<double>(lr->default_value()), 3e-4);
  EXPECT_EQ(find_config_field("optimizer", "lrr"), nullptr);
  // Typed access goes to the right member.
  Config c;
  find_config_field("logging", "every")->set(c, int64_t{7});
  find_config_field("checkpoint", "every")->set(c, int64_t{9});
  EXPECT_EQ(c.logging.every, 7);
  EXPECT_EQ(c.checkpoint.every, 9);
  EXPECT_THROW(lr->set(c, std::string("x")), Error);
}

TEST(ConfigSchema, EnumerationsNameTheirSpellings) {
  std::vector<std::string> enums;
  for (const FieldInfo& f : config_fields())
    if (f.type == FieldType::Enum) enums.push_back(f.path());
  EXPECT_EQ(enums, (std::vector<std::string>{"model.family", "model.base_quant", "parallel.pp_schedule", "parallel.backend",
                                             "parallel.param_dtype", "parallel.reduce_dtype", "parallel.master_location",
                                             "data.format", "data.loss_mask",
                                             "optimizer.name", "optimizer.offload", "schedule.kind", "train.device",
                                             "train.dtype", "train.attention_backend", "train.fp8",
                                             "train.cuda_graph", "logging.level", "logging.wandb"}));
  const FieldInfo* level = find_config_field("logging", "level");
  EXPECT_EQ(std::vector<std::string_view>(level->choices.begin(), level->choices.end()),
            (std::vector<std::string_view>{"trace", "debug", "info", "warn", "error", "off"}));
  EXPECT_EQ(find_config_field("parallel", "pp_schedule")->type_name(), "gpipe | 1f1b | interleaved-1f1b | zb-h1");
  EXPECT_EQ(find_config_field("model", "preset")->type, FieldType::String);  // a table's names, or empty
  EXPECT_EQ(find_config_field("train", "freeze")->type, FieldType::List);
  EXPECT_EQ(find_config_field("model", "lora_targets")->type, FieldType::List);
  // Typed access by spelling.
  Config c;
  const FieldInfo* schedule = find_config_field("parallel", "pp_schedule");
  schedule->set(c, EnumValue{"zb-h1"});
  EXPECT_EQ(c.parallel.pp_schedule, PipelineKind::zb_h1);
  EXPECT_EQ(std::get<EnumValue>(schedule->get(c)).name, "zb-h1");
  EXPECT_EQ(std::get<EnumValue>(schedule->default_value()).name, "1f1b");
  EXPECT_THROW(schedule->set(c, EnumValue{"zb"}), Error);
  // The spellings and the enumerators agree.
  EXPECT_EQ(enum_name(Family::llama), "llama");
  EXPECT_EQ(enum_from<PipelineKind>("interleaved-1f1b"), PipelineKind::interleaved_1f1b);
  EXPECT_EQ(enum_from<PipelineKind>("interleaved"), std::nullopt);
  EXPECT_EQ(testing_support::user_error([] { parse_enum<CommBackend>("gloo", "--backend"); }),
            "--backend: given 'gloo'; valid auto | nccl | cpu");
  EXPECT_EQ(cat("family ", Family::gpt2), "family gpt2");
}

TEST(ConfigSchema, ListsSplitAtCommas) {
  EXPECT_EQ(split_field_list("q, v ,gate"), (StringList{"q", "v", "gate"}));
  EXPECT_EQ(split_field_list("  "), StringList{});
  EXPECT_EQ(split_field_list("a,"), (StringList{"a", ""}));  // kept for validate() to name
  EXPECT_EQ(format_field_value(StringList{"a", "b"}), "[a, b]");
  EXPECT_EQ(format_field_value(StringList{}), "[]");
}

TEST(ConfigSchema, ScalarsAndNearestMatch) {
  FieldValue v;
  EXPECT_TRUE(parse_field_scalar(FieldType::Int, "-12", v));
  EXPECT_EQ(std::get<int64_t>(v), -12);
  EXPECT_FALSE(parse_field_scalar(FieldType::Int, "12abc", v));
  EXPECT_FALSE(parse_field_scalar(FieldType::Int, "", v));
  EXPECT_FALSE(parse_field_scalar(FieldType::Int, "99999999999999999999", v));
  EXPECT_TRUE(parse_field_scalar(FieldType::Double, ".5", v));
  EXPECT_EQ(std::get<double>(v), 0.5);
  EXPECT_FALSE(parse_field_scalar(FieldType::Double, "0.5x", v));
  EXPECT_TRUE(parse_field_scalar(FieldType::Bool, "True", v));
  EXPECT_FALSE(parse_field_scalar(FieldType::Bool, "on", v));

  EXPECT_EQ(format_field_value(3e-4), "3e-4");
  EXPECT_EQ(format_field_value(1e-8), "1e-8");
  EXPECT_EQ(format_field_value(500000.0), "500000.0");
  EXPECT_EQ(format_field_value(0.1), "0.1");
  EXPECT_EQ(format_field_value(1e20), "1e20");
  EXPECT_EQ(format_field_value(0.001), "0.001");
  EXPECT_EQ(format_field_value(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(format_field_value(123456.5), "123456.5");
  EXPECT_EQ(format_field_value(-2.0), "-2.0");
  EXPECT_EQ(format_field_value(int64_t{3}), "3");

  std::vector<std::string> keys = {"lr", "beta1", "beta2", "weight_decay"};
  EXPECT_EQ(nearest_match("lrr", keys), "lr");
  EXPECT_EQ(nearest_match("LR", keys), "lr");
  EXPECT_EQ(nearest_match("weight", keys), "weight_decay");
  EXPECT_EQ(nearest_match("momentum", keys), "");
}

TEST(ConfigPresets, PublishedShapes) {
  struct Want {
    const char* name;
    Family family;
    int64_t layers, heads, kv, d, ff, vocab, seq;
    bool tied;
  };
  const Want wants[] = {
      {"tiny", Family::gpt2, 2, 4, 4, 64, 256, 256, 64, true},
      {"gpt2-124m", Family::gpt2, 12, 12, 12, 768, 3072, 50257, 1024, true},
      {"gpt2-350m", Family::gpt2, 24, 16, 16, 1024, 4096, 50257, 1024, true},
      {"gpt2-774m", Family::gpt2, 36, 20, 20, 1280, 5120, 50257, 1024, true},
      {"gpt2-1.5b", Family::gpt2, 48, 25, 25, 1600, 6400, 50257, 1024, true},
      {"llama3.2-1b", Family::llama, 16, 32, 8, 2048, 8192, 128256, 8192, true},
      {"llama3.2-3b", Family::llama, 28, 24, 8, 3072, 8192, 128256, 8192, true},
      {"llama3.1-8b", Family::llama, 32, 32, 8, 4096, 14336, 128256, 8192, false},
      {"llama3.1-70b", Family::llama, 80, 64, 8, 8192, 28672, 128256, 8192, false},
  };
  ASSERT_EQ(model_preset_names().size(), std::size(wants));
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    Config c;
    c.data.train = {"x"};
    c.model.n_layer = 99;  // a preset sets every shape field, whatever was there
    apply_model_preset(w.name, c.model);
    EXPECT_EQ(c.model.preset, w.name);
    EXPECT_EQ(c.model.family, w.family);
    EXPECT_EQ(c.model.n_layer, w.layers);
    EXPECT_EQ(c.model.n_head, w.heads);
    EXPECT_EQ(c.model.n_kv_head, w.kv);
    EXPECT_EQ(c.model.d_model, w.d);
    EXPECT_EQ(c.model.d_ff, w.ff);
    EXPECT_EQ(c.model.vocab_size, w.vocab);
    EXPECT_EQ(c.model.max_seq_len, w.seq);
    EXPECT_EQ(c.model.tie_embeddings, w.tied);
    EXPECT_EQ(c.model.norm_eps, 1e-5);
    if (w.family == Family::llama) {
      EXPECT_EQ(c.model.rope_theta, 500000.0);
    }
    EXPECT_NO_THROW(validate(c, 1));  // every preset is a valid model
  }
  ModelConfig m;
  try {
    apply_model_preset("gpt2-124", m);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.preset: given 'gpt2-124'; valid tiny | gpt2-124m"), std::string::npos)
        << e.what();
  }
}

TEST(ConfigPrint, YamlListsEveryFieldInTableOrder) {
  std::string y = to_yaml(Config{});
  EXPECT_EQ(y.rfind("model:\n  preset: \"\"\n  family: gpt2\n  vocab_size: 256\n", 0), 0u) << y;
  EXPECT_NE(y.find("optimizer:\n  name: adamw\n  lr: 3e-4\n  beta1: 0.9\n"), std::string::npos) << y;
  EXPECT_NE(y.find("  rope_theta: 500000.0\n"), std::string::npos) << y;
  EXPECT_NE(y.find("  eps: 1e-8\n"), std::string::npos) << y;
  size_t last = 0;
  for (const FieldInfo& f : config_fields()) {
    size_t at = y.find(cat("\n  ", f.key, ": "), last);
    ASSERT_NE(at, std::string::npos) << f.path();
    last = at;
  }
}

TEST(ConfigPrint, YamlRoundTrips) {
  for (Config c : {Config{}, awkward()}) {
    c.source = "x.yaml";
    std::string y = to_yaml(c);
    Config back = parse_config(y, "x.yaml", false);
    EXPECT_EQ(back, c) << y;
    EXPECT_EQ(to_yaml(back), y);
  }
  Config r = awkward();
  resolve(r, 8);
  EXPECT_EQ(parse_config(to_yaml(r), r.source, false), r);
}

TEST(ConfigPrint, TemplateWritesOnlyTheGivenKeys) {
  Config c = awkward();
  resolve(c, 8);  // resolved values (dp, checkpoint.dir, …) must not leak into the template
  c.checkpoint.init_from = "out/imported";
  const std::string y = to_yaml_template(c, {"model", "checkpoint.init_from"});
  Config back = parse_config(y, "t.yaml", false);
  EXPECT_EQ(back.model, c.model) << y;
  EXPECT_EQ(back.checkpoint.init_from, "out/imported");
  Config want;
  want.model = c.model;
  want.checkpoint.init_from = c.checkpoint.init_from;
  want.source = "t.yaml";
  EXPECT_EQ(back, want) << y;
  // Every other key is there to uncomment, with its default and doc.
  EXPECT_NE(y.find("# parallel:\n#   dp: 0  # Data-parallel replicas"), std::string::npos) << y;
  EXPECT_NE(y.find("checkpoint:\n  # dir: \"\"  # Checkpoint directory"), std::string::npos) << y;
  // And --set still reaches them.
  EXPECT_EQ(parse_config(y, "t.yaml", false, {"train.out_dir=elsewhere"}).train.out_dir, "elsewhere");
}

TEST(ConfigPrint, JsonRoundTrips) {
  Config c = awkward();
  std::string j = to_json(c);
  auto parsed = nlohmann::ordered_json::parse(j);
  std::vector<std::string> sections;
  for (const auto& [k, v] : parsed.items()) sections.push_back(k);
  EXPECT_EQ(sections, config_sections());
  EXPECT_TRUE(parsed["optimizer"]["lr"].is_number_float());
  EXPECT_TRUE(parsed["train"]["steps"].is_number_integer());
  EXPECT_EQ(parse_config(j, "x.yaml", true), c) << j;
}

// docs/config.md is generated; this fails when someone changes config.h or the presets without regenerating.
TEST(ConfigDocs, CheckedInReferenceIsCurrent) {
  const std::string path = std::string(MESHTRAIN_SOURCE_DIR) + "/docs/config.md";
  const std::string want = config_reference_markdown();
  if (const char* update = std::getenv("MESHTRAIN_UPDATE_DOCS"); update && std::string(update) == "1") {
    std::ofstream(path) << want;
  }
  std::ifstream in(path);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_TRUE(have.str() == want) << path << " is stale; run: build/bin/meshtrain config --docs > docs/config.md "
                                  << "(or MESHTRAIN_UPDATE_DOCS=1 build/bin/core_tests --gtest_filter=ConfigDocs.*)";
  EXPECT_NE(want.find("| `optimizer.lr` | float | `3e-4` | Peak learning rate |"), std::string::npos);
  EXPECT_NE(want.find("| `llama3.1-8b` | llama | 32 | 32 | 8 | 4096 | 14336 | 128256 | 8192 | no |"), std::string::npos);
  EXPECT_NE(want.find("| `model.family` | gpt2 \\| llama | `gpt2` |"), std::string::npos);  // '|' escaped in cells
  EXPECT_NE(want.find("| `model.lora_targets` | list | `[q, k, v, o, gate, up, down]` |"), std::string::npos);
}

// The example at the top of docs/config.md loads and validates (at world size 2: tp 2, dp derived as 1).
TEST(ConfigDocs, ExampleLoadsAndValidates) {
  const std::string md = config_reference_markdown();
  size_t begin = md.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  begin += 8;
  const std::string example = md.substr(begin, md.find("```", begin) - begin);
  Config c = parse_config(example, "example.yaml", false);
  EXPECT_EQ(c.model.preset, "gpt2-124m");
  EXPECT_EQ(c.model.max_seq_len, 512);
  EXPECT_EQ(c.model.d_model, 768);
  resolve(c, 2);
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_NO_THROW(validate(c, 2));
  EXPECT_NE(md.find("empty = &lt;train.out_dir&gt;/checkpoints"), std::string::npos);
}
