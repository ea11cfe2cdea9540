// StopMatcher (serve/stop_matcher.h): the text before the first stop string and nothing after it, a stop
// string split across pieces, overlapping prefixes held back only while they could still match, several stop
// strings (the earliest match wins), and a multi-byte character split across byte-level pieces.
#include "meshtrain/serve/stop_matcher.h"

#include <gtest/gtest.h>

namespace meshtrain::serve {
namespace {

// Feeds the pieces one by one; returns what was sent, with '|' between the pieces' outputs.
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) out += (i ? "|" : "") + m.feed(pieces[i]);
  return out;
}

TEST(StopMatcher, NoStopsPassEverythingAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(run(m, {"ab", "c"}), "ab|c");
  EXPECT_EQ(m.finish(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopSplitAcrossPiecesIsFoundAndNothingPastItIsSent) {
  StopMatcher m({"END"});
  EXPECT_EQ(run(m, {"one E", "N", "D two", "three"}), "one |||");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, HeldTailIsReleasedWhenItStopsMatching) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.feed("xE"), "x");
  EXPECT_EQ(m.feed("N"), "");
  EXPECT_EQ(m.feed("x"), "ENx");  // "ENx" cannot start "END"
  EXPECT_EQ(m.feed("EN"), "");
  EXPECT_EQ(m.finish(), "EN");  // ended for another reason: the held tail is text after all
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "aab" inside "aaab": the first 'a' is released only once "aaa" shows it cannot start the match.
  StopMatcher m({"aab"});
  EXPECT_EQ(run(m, {"a", "a", "a", "b", "c"}), "||a||");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"abab"});
  EXPECT_EQ(run(n, {"aba", "bab"}), "|");
  EXPECT_TRUE(n.stopped());
}

TEST(StopMatcher, SeveralStopsTheEarliestMatchWins) {
  StopMatcher m({"world", "lo w", "xyz"});
  EXPECT_EQ(m.feed("hello world"), "hel");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"\n\n", "Q:"});
  EXPECT_EQ(run(n, {"A: yes\n", "Q: no"}), "A: yes|\n");  // "\n" was held for "\n\n"; "Q:" matched first
  EXPECT_TRUE(n.stopped());
  StopMatcher e({"", "b"});  // an empty stop string is ignored
  EXPECT_EQ(e.feed("ab"), "a");
}

TEST(StopMatcher, MultiByteCharacterSplitAcrossBytes) {
  const std::string e_acute = "\xC3\xA9";  // é
  StopMatcher m({e_acute});
  EXPECT_EQ(run(m, {"caf", "\xC3", "\xA9", "s"}), "caf|||");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({e_acute});
  EXPECT_EQ(run(n, {"\xC3", "\xA8"}), "|\xC3\xA8");  // è: the held first byte is released whole
  EXPECT_FALSE(n.stopped());
}

}  // namespace
}  // namespace meshtrain::serve
