#include "meshtrain/serve/offline/model_text.h"

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::serve::offline {

ModelText load_model_text(const std::optional<std::string>& tokenizer_json, int64_t model_vocab) {
  ModelText t;
  if (!tokenizer_json) {
    t.no_chat = "the model has no tokenizer.json, so no chat template (give 'prompt' instead)";
    return t;
  }
  const std::string dir = std::filesystem::path(*tokenizer_json).parent_path().string();
  t.tokenizer.emplace(text::model_tokenizer(*tokenizer_json, model_vocab));
  t.eos_tokens = text::stop_token_ids(dir, *t.tokenizer);
  try {
    t.chat.emplace(text::ChatTemplate::from_tokenizer_dir(dir));
  } catch (const UserError& e) {
    t.no_chat = e.what();
  }
  return t;
}

}  // namespace meshtrain::serve::offline
