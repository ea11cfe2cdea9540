// The pre-tokenizer regexes of byte-level BPE tokenizers, matched by hand: std::regex has no \p{L}/\p{N}, so
// each known pattern is an explicit function that behaves as the `tokenizers` package's regex engine does
// (leftmost alternative first, greedy, with the backtracking the pattern implies).
//
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//            \s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen 2:  Llama 3's with \p{N} (one digit) for \p{N}{1,3}
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::text {

enum class SplitPattern { Gpt2, Llama3, Qwen2 };

// The pattern a tokenizer.json regex is, or nullopt for one this code does not know.
std::optional<SplitPattern> recognise_split_pattern(std::string_view regex);

// The regex text of a pattern (as tokenizer.json spells it).
std::string_view split_pattern_regex(SplitPattern p);

// `text` cut at the pattern's matches, in order ("Isolated": every match is a piece, and so is any stretch
// between matches). The pieces concatenate back to `text`.
std::vector<std::string_view> split_by_pattern(std::string_view text, SplitPattern p);

}  // namespace meshtrain::text
