// ModelText: a model's text side for offline generation (docs/serving.md "Offline generation") and for
// `meshtrain serve`, which reads it the same way — its tokenizer,
// end-of-text ids and chat template, read from the tokenizer.json found for the checkpoint (none: the model is
// byte-level, one token per byte, as `meshtrain serve` and `meshtrain generate` treat it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/serve/block_pool.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/tokenizer.h"

namespace meshtrain::serve::offline {

struct ModelText {
  std::optional<text::Tokenizer> tokenizer;  // none: byte-level
  std::optional<text::ChatTemplate> chat;    // none: a `messages` line is refused with `no_chat`
  std::string no_chat;                       // why there is no chat template
  std::vector<TokenId> eos_tokens;           // sampling one ends a reply (finish_reason "stop")
};

// From `tokenizer_json` (nullopt: byte-level). UserError naming the file when the tokenizer does not fit the
// model's vocabulary; a missing or unsupported chat template only refuses the lines that need it.
ModelText load_model_text(const std::optional<std::string>& tokenizer_json, int64_t model_vocab);

}  // namespace meshtrain::serve::offline
