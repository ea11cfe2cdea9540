// The hand-written pre-tokenizer regexes, on the cases where the alternatives and their backtracking matter
// (the reference test compares whole corpora with the `tokenizers` package).
#include <gtest/gtest.h>

#include "meshtrain/text/split_pattern.h"

namespace meshtrain::text {
namespace {

std::vector<std::string> split(std::string_view s, SplitPattern p) {
  std::vector<std::string> out;
  for (auto v : split_by_pattern(s, p)) out.emplace_back(v);
  return out;
}
using V = std::vector<std::string>;

TEST(SplitPattern, RecognisesTheKnownRegexes) {
  EXPECT_EQ(recognise_split_pattern(split_pattern_regex(SplitPattern::Llama3)), SplitPattern::Llama3);
  EXPECT_EQ(recognise_split_pattern(split_pattern_regex(SplitPattern::Gpt2)), SplitPattern::Gpt2);
  EXPECT_FALSE(recognise_split_pattern(R"(\w+|\s+)"));
}

TEST(SplitPattern, Gpt2WordsNumbersPunctuationAndContractions) {
  EXPECT_EQ(split("Hello world's 123 end!!", SplitPattern::Gpt2),
            (V{"Hello", " world", "'s", " 123", " end", "!!"}));
  EXPECT_EQ(split("it'S", SplitPattern::Gpt2), (V{"it", "'", "S"}));  // case-sensitive contractions
  EXPECT_EQ(split("a1b", SplitPattern::Gpt2), (V{"a", "1", "b"}));
  EXPECT_EQ(split("caf\xC3\xA9 \xE4\xB8\xAD", SplitPattern::Gpt2), (V{"caf\xC3\xA9", " \xE4\xB8\xAD"}));
}

TEST(SplitPattern, Gpt2WhitespaceLeavesItsLastSpaceToTheNextWord) {
  // \s+(?!\S): "   b" → "  " + " b"; at the end the whole run; a single space before a newline stays alone.
  EXPECT_EQ(split("a   b", SplitPattern::Gpt2), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("a  ", SplitPattern::Gpt2), (V{"a", "  "}));
  EXPECT_EQ(split("a\n\nb", SplitPattern::Gpt2), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("x\tb", SplitPattern::Gpt2), (V{"x", "\t", "b"}));  // one tab: no ` ?` for it
}

TEST(SplitPattern, Llama3DigitsInThreesAndCaseInsensitiveContractions) {
  EXPECT_EQ(split("1234567", SplitPattern::Llama3), (V{"123", "456", "7"}));
  EXPECT_EQ(split("1234", SplitPattern::Qwen2), (V{"1", "2", "3", "4"}));
  EXPECT_EQ(split("HE'LL 'Re", SplitPattern::Llama3), (V{"HE", "'LL", " '", "Re"}));
}

TEST(SplitPattern, Llama3OnePrefixCharacterBeforeLetters) {
  // [^\r\n\p{L}\p{N}]?\p{L}+ : a space, tab or punctuation joins the word after it; a newline does not.
  EXPECT_EQ(split("a\tb", SplitPattern::Llama3), (V{"a", "\tb"}));
  EXPECT_EQ(split("(word)", SplitPattern::Llama3), (V{"(word", ")"}));
  EXPECT_EQ(split("a\nb", SplitPattern::Llama3), (V{"a", "\n", "b"}));
  EXPECT_EQ(split("x 7", SplitPattern::Llama3), (V{"x", " ", "7"}));
}

TEST(SplitPattern, Llama3NewlinesEndTheirWhitespaceRun) {
  // \s*[\r\n]+ takes white space up to the last newline; punctuation takes the newlines after it.
  EXPECT_EQ(split("a  \n\n  b", SplitPattern::Llama3), (V{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(split("end.\r\n\r\nNext", SplitPattern::Llama3), (V{"end", ".\r\n\r\n", "Next"}));
}

TEST(SplitPattern, PiecesConcatenateBackEvenForInvalidUtf8) {
  const std::string s = "ok \xFF\xFE bad \xE4\xB8 cut";
  for (auto p : {SplitPattern::Gpt2, SplitPattern::Llama3}) {
    std::string back;
    for (auto& v : split(s, p)) back += v;
    EXPECT_EQ(back, s);
  }
}

}  // namespace
}  // namespace meshtrain::text
