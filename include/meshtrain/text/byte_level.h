// GPT-2's byte-to-unicode mapping: every byte gets a printable code point, so a byte-level BPE vocabulary is
// a set of ordinary strings. Printable Latin-1 bytes map to themselves; the rest (controls, space, …) to
// U+0100 onwards in byte order ("Ġ" is the space, "Ċ" the newline).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain::text {

// The code point byte `b` stands for.
char32_t byte_to_char(uint8_t b);

// The byte a code point stands for, or -1 when it stands for none.
int char_to_byte(char32_t cp);

// `bytes` with every byte replaced by its code point, as UTF-8 (what the BPE vocabulary holds).
std::string bytes_to_symbols(std::string_view bytes);

}  // namespace meshtrain::text
