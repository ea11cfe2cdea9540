// GPT-2's byte-to-unicode mapping: a bijection, printable Latin-1 kept, the rest from U+0100 in byte order.
#include <gtest/gtest.h>

#include <set>

#include "meshtrain/text/byte_level.h"

namespace meshtrain::text {
namespace {

TEST(ByteLevel, KnownSymbols) {
  EXPECT_EQ(byte_to_char('A'), U'A');
  EXPECT_EQ(byte_to_char(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_to_char(0), U'\u0100');
  EXPECT_EQ(byte_to_char(0xAD), U'\u0143');  // the soft hyphen is the last non-printable byte: 256 + 67
  EXPECT_EQ(byte_to_char(0xE9), U'\u00E9');  // é stays
  EXPECT_EQ(bytes_to_symbols("a b\n"), "a\xC4\xA0" "b\xC4\x8A");
}

TEST(ByteLevel, IsABijectionOverAllBytes) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << b;
    EXPECT_EQ(char_to_byte(c), b);
  }
  EXPECT_EQ(char_to_byte(U'\u0144'), -1);  // one past the last mapped code point
  EXPECT_EQ(char_to_byte(U' '), -1);       // the space byte is Ġ, not itself
  EXPECT_EQ(char_to_byte(U'\u4E2D'), -1);
}

}  // namespace
}  // namespace meshtrain::text
