// Code-point classes (the generated table) and UTF-8 reading/writing with invalid input.
#include <gtest/gtest.h>

#include "meshtrain/text/unicode.h"

namespace meshtrain::text {
namespace {

TEST(Unicode, ClassesOfScriptsDigitsAndSpaces) {
  EXPECT_EQ(char_class('a'), CharClass::Letter);
  EXPECT_EQ(char_class(0x00E9), CharClass::Letter);   // é
  EXPECT_EQ(char_class(0x05D0), CharClass::Letter);   // Hebrew alef
  EXPECT_EQ(char_class(0x4E2D), CharClass::Letter);   // CJK 中
  EXPECT_EQ(char_class(0x02B0), CharClass::Letter);   // modifier letter (Lm)
  EXPECT_EQ(char_class('7'), CharClass::Number);
  EXPECT_EQ(char_class(0x0663), CharClass::Number);   // Arabic-Indic three (Nd)
  EXPECT_EQ(char_class(0x2167), CharClass::Number);   // Roman numeral eight (Nl)
  EXPECT_EQ(char_class(0x00BD), CharClass::Number);   // ½ (No)
  EXPECT_EQ(char_class(0x00A0), CharClass::Space);    // no-break space
  EXPECT_EQ(char_class(0x0085), CharClass::Space);    // next line
  EXPECT_EQ(char_class(0x3000), CharClass::Space);    // ideographic space
  EXPECT_EQ(char_class('\v'), CharClass::Space);
  EXPECT_EQ(char_class(0x001C), CharClass::Other);    // Python calls it space; Unicode White_Space does not
  EXPECT_EQ(char_class(0x200B), CharClass::Other);    // zero-width space is a format character
  EXPECT_EQ(char_class(0x1F600), CharClass::Other);   // 😀
  EXPECT_EQ(char_class('\''), CharClass::Other);
  EXPECT_EQ(char_class(0x10FFFF), CharClass::Other);
}

TEST(Unicode, DecodesAndEncodesEveryLength) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  auto cps = decode_utf8(s);
  ASSERT_EQ(cps.size(), 4u);
  EXPECT_EQ(cps[1].cp, 0xE9u);
  EXPECT_EQ(cps[2].cp, 0x4E2Du);
  EXPECT_EQ(cps[3].cp, 0x1F600u);
  EXPECT_EQ(cps[3].offset, 6u);
  EXPECT_EQ(cps[3].size, 4u);
  std::string back;
  for (auto c : cps) append_utf8(back, c.cp);
  EXPECT_EQ(back, s);
}

TEST(Unicode, InvalidBytesAreOneCodePointEach) {
  auto cps = decode_utf8("\xFF" "a\xE4\xB8");
  ASSERT_EQ(cps.size(), 4u);
  EXPECT_EQ(cps[0].cp, 0xFFFDu);
  EXPECT_EQ(cps[1].cp, U'a');
  EXPECT_EQ(cps[3].offset, 3u);
}

TEST(Unicode, SequenceLengthSaysIncompleteOrInvalid) {
  EXPECT_EQ(utf8_sequence_length("\xE4\xB8\xAD", 0), 3);
  EXPECT_EQ(utf8_sequence_length("\xE4\xB8", 0), -1);
  EXPECT_EQ(utf8_sequence_length("\xE4" "a", 0), 0);
  EXPECT_EQ(utf8_sequence_length("\xC0\x80", 0), 0);           // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0);       // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0);   // above U+10FFFF
}

TEST(Unicode, LossyReplacesMaximalInvalidSubparts) {
  // The examples of the Unicode standard's "U+FFFD substitution of maximal subparts" (Python's
  // bytes.decode("utf-8", "replace") gives the same).
  EXPECT_EQ(utf8_lossy("a\xE4\xB8" "b"), "a\xEF\xBF\xBD" "b");              // E4 B8: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                    // cut at the end: one
  EXPECT_EQ(utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");            // stray continuations: one each
  EXPECT_EQ(utf8_lossy("\xE0\x80" "a"), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");    // E0 80 is no prefix: two
  EXPECT_EQ(utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
}

}  // namespace
}  // namespace meshtrain::text
