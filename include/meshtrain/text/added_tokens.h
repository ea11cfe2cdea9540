// A tokenizer's added tokens (special tokens such as <|endoftext|>, <|begin_of_text|>, and user-added
// ones): found in the text first, by exact match, before any pre-tokenization, the way the `tokenizers`
// package's AddedVocabulary does: leftmost match first, the longest at that position, with the token's
// single_word / lstrip / rstrip options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshtrain/text/normalizer.h"

namespace meshtrain::text {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens)
  bool single_word = false;  // only where no letter or digit touches it
  bool lstrip = false;       // takes the white space on its left
  bool rstrip = false;       // takes the white space on its right
  bool normalized = false;   // matched after the normalizer (in a second pass), as the normalizer writes it
};

// A stretch of text: an added token's id, or plain text to pre-tokenize.
struct TextPiece {
  std::optional<int64_t> token;
  std::string_view text;
};

class AddedTokens {
 public:
  // `normalize`: the tokenizer's normalizer; a `normalized` token is looked for as it rewrites the content
  // (Llama 2's "Moses" as "▁Moses"), which is what the `tokenizers` package matches.
  explicit AddedTokens(std::vector<AddedToken> tokens, const std::vector<NormalizeStep>& normalize = {});

  // `text` as plain stretches and added tokens, in order (the texts concatenate back to `text`).
  std::vector<TextPiece> split(std::string_view text) const;
  // split()'s two passes, for a tokenizer with a normalizer between them: the tokens matched in the raw
  // text, then, in a plain stretch after normalization, the tokens marked `normalized`.
  std::vector<TextPiece> split_raw(std::string_view text) const;
  std::vector<TextPiece> split_normalized(std::string_view text) const;

  const AddedToken* by_id(int64_t id) const;
  // The token's text as matched: its content, or for a `normalized` token the content as the normalizer
  // writes it — also what `tokenizers` decodes it to.
  const std::string& matched(const AddedToken& t) const { return match_[static_cast<size_t>(&t - tokens_.data())]; }
  const AddedToken* by_content(std::string_view content) const;
  const std::vector<AddedToken>& all() const { return tokens_; }

 private:
  // Tokens of one pass by their first byte, longest first.
  using Index = std::unordered_map<unsigned char, std::vector<size_t>>;  // indices into tokens_
  void split_pass(const Index& index, std::string_view text, std::vector<TextPiece>& out) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_;  // per token: the text matched (the content, normalized where marked)
  std::unordered_map<int64_t, size_t> by_id_;
  Index raw_, normalized_;
};

}  // namespace meshtrain::text
