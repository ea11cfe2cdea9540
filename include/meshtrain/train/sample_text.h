// SampleText: how a training run turns its sample prompts into tokens and its samples back into text — through
// the model's own tokenizer.json when the run has one (train.out_dir, or checkpoint.init_from where `meshtrain
// import` copied it), and for instruction data (shards with loss masks) its chat template, the prompt as the
// user's turn with the assistant's opened; byte-level otherwise (a model trained on `meshtrain prepare`'s bytes).
//
//   const SampleText text = SampleText::for_run(cfg, /*instruction_data=*/loader.masks_targets());
//   auto ids = text.prompt_ids("Who made the light?");
//   std::string reply = text.decode(new_ids);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/tokenizer.h"

namespace meshtrain::train {

class SampleText {
 public:
  // UserError naming the tokenizer.json found when it has more ids than model.vocab_size.
  static SampleText for_run(const Config& cfg, bool instruction_data);

  // The prompt's tokens: the chat template's rendering (instruction data with a template) or the plain text
  // with the tokenizer's special tokens, as transformers encodes it; its bytes without a tokenizer.
  std::vector<int64_t> prompt_ids(const std::string& prompt) const;
  // Valid UTF-8 always (invalid bytes of a byte-level sample become U+FFFD).
  std::string decode(const std::vector<int64_t>& ids) const;
  // The ids that end a sample (the tokenizer's end-of-text ids); none byte-level.
  const std::vector<int64_t>& stop_tokens() const { return stop_; }
  bool chat() const { return chat_.has_value(); }
  // "runs/x/tokenizer.json (chat template)", or "byte-level (no tokenizer.json in …)": for the log.
  const std::string& describe() const { return describe_; }

 private:
  std::optional<text::Tokenizer> tok_;
  std::optional<text::ChatTemplate> chat_;
  std::vector<int64_t> stop_;
  std::string describe_;
};

}  // namespace meshtrain::train
