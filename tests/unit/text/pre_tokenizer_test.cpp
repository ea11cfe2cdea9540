// The pre-tokenizer steps added for SentencePiece-style tokenizers: a literal Split with each behavior and
// Metaspace's prepend schemes and split, with the pieces the `tokenizers` package gives for the same input.
#include <gtest/gtest.h>

#include "meshtrain/text/pre_tokenizer.h"

namespace meshtrain::text {
namespace {

using Pieces = std::vector<std::string>;
const std::string kSp = "\xE2\x96\x81";  // ▁

PreTokenizeStep literal(PreTokenizeStep::Behavior b) {
  PreTokenizeStep s;
  s.kind = PreTokenizeStep::Kind::SplitLiteral;
  s.literal = " ";
  s.behavior = b;
  return s;
}

PreTokenizeStep metaspace(PreTokenizeStep::Prepend p, bool split) {
  PreTokenizeStep s;
  s.kind = PreTokenizeStep::Kind::Metaspace;
  s.literal = kSp;
  s.prepend = p;
  s.split = split;
  return s;
}

TEST(PreTokenizer, LiteralSplitJoinsTheMatchAsItsBehaviorSays) {
  using B = PreTokenizeStep::Behavior;
  // pre_tokenizers.Split(" ", behavior).pre_tokenize_str(" a  b ") in the `tokenizers` package:
  EXPECT_EQ(pre_tokenize(" a  b ", {literal(B::Isolated)}, true), (Pieces{" ", "a", " ", " ", "b", " "}));
  EXPECT_EQ(pre_tokenize(" a  b ", {literal(B::Removed)}, true), (Pieces{"a", "b"}));
  EXPECT_EQ(pre_tokenize(" a  b ", {literal(B::MergedWithPrevious)}, true), (Pieces{" ", "a ", " ", "b "}));
  EXPECT_EQ(pre_tokenize(" a  b ", {literal(B::MergedWithNext)}, true), (Pieces{" a", " ", " b", " "}));
  EXPECT_EQ(pre_tokenize("ab", {literal(B::Isolated)}, true), (Pieces{"ab"}));
}

TEST(PreTokenizer, MetaspaceReplacesSpacesPrependsAndSplits) {
  using P = PreTokenizeStep::Prepend;
  EXPECT_EQ(pre_tokenize("  a b", {metaspace(P::Always, true)}, true), (Pieces{kSp, kSp + "a", kSp + "b"}));
  EXPECT_EQ(pre_tokenize("a b", {metaspace(P::Always, false)}, false), (Pieces{kSp + "a" + kSp + "b"}));
  // "first": only the input's first stretch gets the "▁" (not one after an added token).
  EXPECT_EQ(pre_tokenize("a b", {metaspace(P::First, false)}, true), (Pieces{kSp + "a" + kSp + "b"}));
  EXPECT_EQ(pre_tokenize("a b", {metaspace(P::First, false)}, false), (Pieces{"a" + kSp + "b"}));
  EXPECT_EQ(pre_tokenize("a", {metaspace(P::Never, true)}, true), (Pieces{"a"}));
  EXPECT_EQ(pre_tokenize("", {metaspace(P::Always, true)}, true), (Pieces{}));
}

}  // namespace
}  // namespace meshtrain::text
