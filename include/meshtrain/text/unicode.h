// What the byte-level pre-tokenizers ask of a code point (letter, number, white space, other), and UTF-8
// reading and writing. The class table is generated from Unicode data (src/text/gen_unicode_table.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::text {

// \p{L}, \p{N}, \s (Unicode White_Space) of the tokenizer regexes; everything else is Other.
enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

CharClass char_class(char32_t cp);

// \w of the Rust regex crate (letters and other alphabetic characters, marks, decimal digits, connector
// punctuation, ZWJ/ZWNJ): what decides whether a single_word added token touches a word.
bool is_word_char(char32_t cp);

// One code point of a UTF-8 string: its value and where its bytes lie. A byte that starts no valid sequence
// is a code point of its own (U+FFFD, class Other), so any byte string can be split and nothing is lost.
struct CodePoint {
  char32_t cp;
  uint32_t offset;  // of its first byte in the string
  uint32_t size;    // bytes
};

std::vector<CodePoint> decode_utf8(std::string_view s);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// Length of the valid UTF-8 sequence starting at s[i]: 1..4; 0 when the bytes there are invalid, -1 when
// they are a valid but incomplete start (the string ends inside the sequence).
int utf8_sequence_length(std::string_view s, size_t i);

// `bytes` as UTF-8, each maximal invalid subsequence replaced by one U+FFFD (the Unicode recommendation,
// which Rust's String::from_utf8_lossy and the `tokenizers` decoders follow).
std::string utf8_lossy(std::string_view bytes);

}  // namespace meshtrain::text
