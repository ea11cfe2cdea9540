// data.train / data.val as lists of sources (core/data_sources.h): the forms a user writes them in (YAML
// mapping, PATTERN:WEIGHT strings, --set), the rules validate() applies, and the config check's file rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/data_sources.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/glob.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::user_error;

namespace {

Config sources_yaml(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_config(text, "cfg.yaml", false, sets);
}

std::string invalid_sources(const StringList& train, const StringList& val = {}) {
  Config c;
  c.source = "cfg.yaml";
  c.data.train = train;
  c.data.val = val;
  return user_error([&] { validate(c, 1); });
}

}  // namespace

TEST(DataSources, ParsedFromPatternColonWeight) {
  EXPECT_EQ(parse_data_source("a/*.bin:0.7"), (DataSource{"a/*.bin", 0.7, true}));
  EXPECT_EQ(parse_data_source("b.bin"), (DataSource{"b.bin"}));
  EXPECT_EQ(parse_data_source("c.bin:3"), (DataSource{"c.bin", 3, true}));
  EXPECT_EQ(parse_data_source("d.bin:-1"), (DataSource{"d.bin", -1, true}));
  // Only a number after the last ':' is a weight.
  EXPECT_EQ(parse_data_source("dir:x/e.bin"), (DataSource{"dir:x/e.bin"}));
  EXPECT_TRUE(is_synthetic_data({"synthetic"}));
  EXPECT_FALSE(is_synthetic_data({"synthetic", "a.bin"}));
}

TEST(DataSources, YamlMappingsStringsAndSetGiveTheSameList) {
  const StringList want = {"a/*.bin:0.7", "b.bin:0.3"};
  EXPECT_EQ(sources_yaml("data:\n  train:\n    - {path: a/*.bin, weight: 0.7}\n    - path: b.bin\n      weight: 0.3\n")
                .data.train, want);
  EXPECT_EQ(sources_yaml("data:\n  train: [a/*.bin:0.7, b.bin:0.3]\n").data.train, want);
  EXPECT_EQ(sources_yaml("", {"data.train=a/*.bin:0.7,b.bin:0.3"}).data.train, want);
  EXPECT_EQ(parse_config(R"({"data": {"train": [{"path": "a/*.bin", "weight": 0.7}, "b.bin:0.3"]}})", "c.json", true)
                .data.train, want);
  // A mapping without a weight is the bare pattern; one string is one source, as before lists.
  EXPECT_EQ(sources_yaml("data:\n  val: [{path: v.bin}]\n").data.val, StringList{"v.bin"});
  EXPECT_EQ(sources_yaml("data:\n  train: data/train_*.bin\n").data.train, StringList{"data/train_*.bin"});
  // Commas inside braces belong to a glob's alternatives.
  EXPECT_EQ(sources_yaml("", {"data.train=data/{a,b}_*.bin,c.bin:2"}).data.train, (StringList{"data/{a,b}_*.bin", "c.bin:2"}));
  EXPECT_EQ(split_field_list("x{1,2}y, z"), (StringList{"x{1,2}y", "z"}));
  // A mapping with another key, or no path: one line naming the key.
  EXPECT_NE(user_error([] { sources_yaml("data:\n  train: [{file: a.bin}]\n"); })
                .find("cfg.yaml:2:10: data.train: a source {file: 'a.bin'}; valid: {path: PATTERN, weight: NUMBER}"),
            std::string::npos);
  EXPECT_NE(user_error([] { sources_yaml("data:\n  train: [{weight: 2}]\n"); }).find("data.train: a source without a path"),
            std::string::npos);
  // Other lists take no mappings.
  EXPECT_NE(user_error([] { sources_yaml("train:\n  freeze: [{path: a}]\n"); }).find("a sequence holding a mapping"),
            std::string::npos);
}

TEST(DataSources, ValidateRefusesBadWeightsInOneLine) {
  EXPECT_NE(invalid_sources({"a.bin:0", "b.bin:1"}).find("cfg.yaml: data.train: 'a.bin:0': weight 0; valid a number > 0"),
            std::string::npos);
  EXPECT_NE(invalid_sources({"a.bin:-0.5", "b.bin:1"}).find("'a.bin:-0.5': weight -0.5; valid a number > 0"), std::string::npos);
  EXPECT_NE(invalid_sources({"a.bin:1", "b.bin"}).find("data.train: 1 of 2 sources have a weight; valid: every one"),
            std::string::npos);
  EXPECT_NE(invalid_sources({"a.bin"}, {"v.bin:0.5"}).find("cfg.yaml: data.val: 'v.bin:0.5' has a weight; validation "
                                                   "sources take none"), std::string::npos);
  EXPECT_NE(invalid_sources({"a.bin", ""}).find("data.train: an empty entry in 2 sources"), std::string::npos);
  EXPECT_NE(invalid_sources({"synthetic", "a.bin"}).find("data.train: 'synthetic' among 2 sources; valid: synthetic alone"),
            std::string::npos);
  EXPECT_NE(invalid_sources({"a.bin"}, {"synthetic"}).find("data.val: 'synthetic' among 1 sources"), std::string::npos);
  Config ok;
  ok.data.train = {"a.bin:0.7", "b.bin:0.3"};
  ok.data.val = {"a_val.bin", "b_val.bin"};
  EXPECT_NO_THROW(validate(ok, 1));
}

TEST(DataSources, EverySourceMustMatchAndAMixtureSourceHoldAWindow) {
  const auto dir = testing_support::temp_dir("sources");
  const auto shard = [&](const std::string& name, size_t bytes) {
    std::ofstream((dir / name).string(), std::ios::binary) << std::string(bytes, 'x');
    return (dir / name).string();
  };
  const std::string big = shard("big.bin", 2 * 4000), tiny = shard("tiny.bin", 2 * 20);
  Config c;
  c.source = "cfg.yaml";
  c.data.seq_len = 32;
  c.parallel.dp = 1;
  c.train.micro_batch_size = 4;
  c.data.train = {big + ":1", (dir / "none_*.bin").string() + ":1"};
  EXPECT_NE(user_error([&] { check_inputs_exist(c); })
                .find("cfg.yaml: data.train: '" + (dir / "none_*.bin").string() + "' matches no file"),
            std::string::npos);
  c.data.train = {big + ":1", tiny + ":1"};
  EXPECT_NE(user_error([&] { check_inputs_exist(c); })
                .find("data.train: '" + tiny + "' holds no window of 33 tokens (data.seq_len + 1); each source of a "
                      "mixture needs one"),
            std::string::npos);
  // Each validation source must hold a window a data-parallel rank on its own, where validation runs (it reads
  // smaller micro-batches where it holds fewer than a step's).
  c.data.train = {big};
  c.data.val = {big, tiny};
  c.train.eval_every = 10;
  EXPECT_NE(user_error([&] { check_inputs_exist(c); }).find("data.val: '" + tiny + "' holds at most 0 windows"),
            std::string::npos);
  c.train.eval_every = 0;
  EXPECT_NO_THROW(check_inputs_exist(c));
  // A brace glob is one source over every file it names.
  EXPECT_EQ(expand_glob((dir / "{big,tiny}.bin").string(), "data.train"), (std::vector<std::string>{big, tiny}));
}
