// recorded_config (ckpt/recorded_config.h): the config a checkpoint recorded, from meta.json's "config" or,
// where earlier trainers kept it, the state's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/recorded_config.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::testing_support;

namespace {

// A resolved config of a tiny `family` model, as the trainer records it.
nlohmann::json config_json(const std::string& family) {
  Config cfg = parse_config("{}", "test", /*json=*/true,
                            {"model.family=" + family, "model.vocab_size=32", "model.n_layer=1", "model.n_head=2",
                             "model.d_model=16", "model.max_seq_len=8"});
  resolve(cfg, 1);
  return nlohmann::json::parse(to_json(cfg));
}

}  // namespace

TEST(RecordedConfig, ReadsTheCurrentLocation) {
  ckpt::CheckpointMeta meta;
  meta.config = config_json("llama");
  const Config cfg = ckpt::recorded_config("/ck/step_1", meta, {"train.micro_batch_size=3"});
  EXPECT_EQ(cfg.model.family, Family::llama);
  EXPECT_EQ(cfg.model.d_model, 16);
  EXPECT_EQ(cfg.train.micro_batch_size, 3);  // the overrides go on top
}

TEST(RecordedConfig, ReadsTheOlderLocationInTheState) {
  ckpt::CheckpointMeta meta;  // "config": {} as earlier trainers wrote it, the config in the state
  meta.state["config"] = config_json("gpt2");
  EXPECT_EQ(ckpt::recorded_config("/ck/step_1", meta).model.family, Family::gpt2);
  meta.config = config_json("llama");  // both: the current location wins
  EXPECT_EQ(ckpt::recorded_config("/ck/step_1", meta).model.family, Family::llama);
}

TEST(RecordedConfig, NoConfigIsOneLineNamingTheFile) {
  ckpt::CheckpointMeta meta;
  std::string err = user_error([&] { ckpt::recorded_config("/ck/step_1", meta); });
  EXPECT_EQ(err.rfind("/ck/step_1/meta.json: no config recorded", 0), 0u) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  meta.config = {{"train", {{"micro_batch_size", 2}}}};  // a config without its model section
  err = user_error([&] { ckpt::recorded_config("/ck/step_1", meta); });
  EXPECT_EQ(err.rfind("/ck/step_1/meta.json: no config recorded", 0), 0u) << err;
}
