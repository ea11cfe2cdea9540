// BPE merges: lowest rank first, leftmost first among equal ranks, stale candidates skipped, ignore_merges,
// byte fallback and fused unknown tokens.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/text/bpe.h"

namespace meshtrain::text {
namespace {

std::unordered_map<std::string, int64_t> vocab(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, int64_t> v;
  for (size_t i = 0; i < tokens.size(); ++i) v[tokens[i]] = static_cast<int64_t>(i);
  return v;
}

std::vector<int64_t> enc(const Bpe& b, std::string_view w) {
  std::vector<int64_t> out;
  b.encode(w, out);
  return out;
}

TEST(Bpe, AppliesMergesByRankNotByPosition) {
  //                       0    1    2    3     4     5
  const Bpe b(vocab({"a", "b", "c", "ab", "bc", "abc"}), {{"b", "c"}, {"a", "b"}, {"ab", "c"}}, false, std::nullopt);
  // "abc": b+c has rank 0, so "a" "bc"; ab+c is never possible.
  EXPECT_EQ(enc(b, "abc"), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(enc(b, "ab"), (std::vector<int64_t>{3}));
  EXPECT_EQ(enc(b, "abab"), (std::vector<int64_t>{3, 3}));
}

TEST(Bpe, OverlappingPairsMergeLeftmostFirst) {
  const Bpe b(vocab({"a", "aa", "aaa", "aaaa"}), {{"a", "a"}, {"aa", "aa"}, {"aa", "a"}}, false, std::nullopt);
  EXPECT_EQ(enc(b, "aaa"), (std::vector<int64_t>{2}));   // (aa)a → aaa
  EXPECT_EQ(enc(b, "aaaa"), (std::vector<int64_t>{3}));  // (aa)(aa) → aaaa, rank 1 before rank 2
  EXPECT_EQ(enc(b, "aaaaa"), (std::vector<int64_t>{3, 0}));
}

TEST(Bpe, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  // Without ignore_merges "abc" never becomes one token (b+c first); with it, the vocabulary entry wins.
  auto v = vocab({"a", "b", "c", "ab", "bc", "abc"});
  const std::vector<std::pair<std::string, std::string>> merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(enc(Bpe(v, merges, false, std::nullopt), "abc"), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(enc(Bpe(v, merges, true, std::nullopt), "abc"), (std::vector<int64_t>{5}));
}

TEST(Bpe, UnknownCharactersBecomeUnkOrAreDropped) {
  auto v = vocab({"a", "<unk>"});
  EXPECT_EQ(enc(Bpe(v, {}, false, std::nullopt), "axa"), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(enc(Bpe(v, {}, false, 1), "axa"), (std::vector<int64_t>{0, 1, 0}));
}

TEST(Bpe, ByteFallbackSpellsAnUnknownCharacterInByteTokens) {
  //                       0    1      2        3        4        5
  auto v = vocab({"a", "<unk>", "<0xC3>", "<0xA9>", "<0x78>", "a<0xC3>"});
  // "é" (C3 A9) is not in the vocabulary: its bytes; "x" has a byte token too. Byte tokens merge like any.
  EXPECT_EQ(enc(Bpe(v, {}, false, 1, true), "a\xC3\xA9" "x"), (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(enc(Bpe(v, {{"a", "<0xC3>"}}, false, 1, true), "a\xC3\xA9"), (std::vector<int64_t>{5, 3}));
  // Without byte_fallback the character is the unknown token.
  EXPECT_EQ(enc(Bpe(v, {}, false, 1, false), "a\xC3\xA9"), (std::vector<int64_t>{0, 1}));
}

TEST(Bpe, FuseUnkJoinsConsecutiveUnknownCharacters) {
  auto v = vocab({"a", "<unk>"});
  EXPECT_EQ(enc(Bpe(v, {}, false, 1, false, false), "axya"), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(enc(Bpe(v, {}, false, 1, false, true), "axya"), (std::vector<int64_t>{0, 1, 0}));
  // A character whose bytes lack byte tokens is unknown even with byte_fallback.
  EXPECT_EQ(enc(Bpe(v, {}, false, 1, true, true), "x\xC3\xA9" "a"), (std::vector<int64_t>{1, 0}));
}

TEST(Bpe, AMergeOutsideTheVocabularyIsNamed) {
  try {
    Bpe(vocab({"a", "b"}), {{"a", "b"}}, false, std::nullopt);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("merge 0 ('a' 'b')"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshtrain::text
