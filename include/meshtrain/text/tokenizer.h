// A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the `tokenizers` package's format):
// GPT-2 and Llama 3 style. Encoding: added/special tokens split out first (exact match), the pre-tokenizer
// steps (the regex Split and ByteLevel) cut the rest into words, each word's bytes become byte-level symbols
// and BPE merges them; the post-processor's template adds the BOS-style tokens when asked. Decoding: ids →
// bytes → UTF-8 with invalid sequences replaced (StreamDecoder does it token by token).
//
// What it reads is checked: a normaliser, model, pre-tokenizer step, post-processor or decoder other than the
// ones above is a UserError naming the file and the component, never a silently different tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/text/added_tokens.h"
#include "meshtrain/text/bpe.h"
#include "meshtrain/text/split_pattern.h"

namespace meshtrain::text {

// One step of the pre-tokenizer, in order.
struct PreTokenizeStep {
  enum class Kind { Split, ByteLevel } kind = Kind::ByteLevel;
  SplitPattern pattern = SplitPattern::Gpt2;  // Split: the regex
  bool add_prefix_space = false;              // ByteLevel: a piece not starting with ' ' gets one
  bool use_regex = true;                      // ByteLevel: also split with the GPT-2 regex
};

class Tokenizer {
 public:
  // Reads a tokenizer.json; `path` names it in every error.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text.
  static Tokenizer from_json_text(std::string_view json, const std::string& where);

  // Text → ids. `add_special_tokens`: wrap in the post-processor's template (e.g. Llama 3's BOS).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Ids → text; an id outside the vocabulary is skipped (as `tokenizers` does).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  // The bytes one token decodes to ("" for special tokens when skipped, and for unknown ids).
  std::string token_bytes(int64_t id, bool skip_special_tokens = true) const;
  // The pieces BPE sees (byte-level symbols), for tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  bool is_special(int64_t id) const;
  // One more than the largest id (vocabulary and added tokens).
  int64_t vocab_size() const { return vocab_size_; }

 private:
  Tokenizer(Bpe bpe, AddedTokens added, std::vector<PreTokenizeStep> steps);

  std::unique_ptr<Bpe> bpe_;
  AddedTokens added_;
  std::vector<PreTokenizeStep> steps_;
  std::vector<std::string> id_to_token_;  // the BPE vocabulary by id
  std::vector<int64_t> prefix_, suffix_;  // the post-processor's tokens around the text
  int64_t vocab_size_ = 0;
  friend struct TokenizerLoader;
};

}  // namespace meshtrain::text
