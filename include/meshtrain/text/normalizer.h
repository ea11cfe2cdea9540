// The normalizers of tokenizer.json that SentencePiece-style tokenizers carry (Llama 2, Mistral, Gemma):
// `Prepend` (a string put before a non-empty piece, "▁") and `Replace` with a literal pattern (" " → "▁"),
// alone or in a `Sequence`. The `tokenizers` package applies the normalizer to each stretch of text between
// added tokens, so a prepended "▁" starts every such stretch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::text {

struct NormalizeStep {
  enum class Kind { Prepend, Replace } kind = Kind::Replace;
  std::string pattern;  // Replace: the literal text replaced (every non-overlapping match, left to right)
  std::string content;  // Prepend: what is put first; Replace: what replaces the pattern
};

// Replace's rule, which the Replace decoder and Python's str.replace share: each non-overlapping match of
// `pattern` (non-empty), left to right, replaced by `content`; at most `count` of them when it is ≥ 0.
std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view content, long count = -1);

// `text` through `steps` in order; no steps: `text` as it is.
std::string normalize(std::string_view text, const std::vector<NormalizeStep>& steps);

}  // namespace meshtrain::text
