// model_config_from_hf (ckpt/hf_convert.h): token ids a Hugging Face config.json gives that lie outside its
// vocabulary — transformers writes GPT2Config's 50256 whatever vocab_size is — are imported as none, so the
// imported config passes meshtrain's own check.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/hf_convert.h"
#include "meshtrain/core/config.h"

using namespace meshtrain;

namespace {

nlohmann::json tiny_gpt2() {
  return {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_embd", 16}, {"n_layer", 1}, {"n_head", 2},
          {"n_positions", 32}};
}

}  // namespace

TEST(HfConvert, TokenIdsOutsideTheVocabularyAreDropped) {
  nlohmann::json hf = tiny_gpt2();
  ModelConfig m = ckpt::model_config_from_hf(hf, "hf/config.json");
  EXPECT_EQ(m.bos_token_id, -1);  // none given
  EXPECT_EQ(m.eos_token_id, -1);
  hf["bos_token_id"] = 50256;  // what transformers writes for a GPT2Config(vocab_size=256)
  hf["eos_token_id"] = 50256;
  m = ckpt::model_config_from_hf(hf, "hf/config.json");
  EXPECT_EQ(m.vocab_size, 256);
  EXPECT_EQ(m.bos_token_id, -1);
  EXPECT_EQ(m.eos_token_id, -1);
  hf["bos_token_id"] = 0;
  hf["eos_token_id"] = nlohmann::json::array({256, 7});  // a list's first id is the one kept
  m = ckpt::model_config_from_hf(hf, "hf/config.json");
  EXPECT_EQ(m.bos_token_id, 0);
  EXPECT_EQ(m.eos_token_id, -1);
  hf["eos_token_id"] = 255;
  m = ckpt::model_config_from_hf(hf, "hf/config.json");
  EXPECT_EQ(m.eos_token_id, 255);
  hf = tiny_gpt2();
  hf["bos_token_id"] = hf["eos_token_id"] = 50256;
  Config cfg;
  cfg.model = ckpt::model_config_from_hf(hf, "hf/config.json");
  cfg.data.train = {"x.bin"};
  EXPECT_NO_THROW(validate(cfg, 1));
}
