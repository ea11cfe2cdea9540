// StopMatcher: OpenAI's `stop` strings matched against a request's text as it streams (docs/serving.md
// "meshtrain serve"). Text goes in piece by piece as the tokens are decoded; what comes out is safe to send:
// the text ends before the first stop string, and a tail that could still be the start of one is held back
// until the next piece shows it is not (or until finish()). Matching is on bytes, so a stop string split
// across tokens, or a multi-byte character split across byte-level tokens, is found all the same.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::serve {

class StopMatcher {
 public:
  // Empty stop strings are ignored; no stop strings: every piece passes through at once.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `piece`; returns the text now safe to send. After a match it returns the text before the match,
  // then nothing more.
  std::string feed(std::string_view piece);
  // The held-back tail when the generation ended for another reason (EOS, max_tokens); empty after a match.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  // The length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t partial_tail() const;

  std::vector<std::string> stops_;
  std::string held_;  // received but not yet returned
  bool stopped_ = false;
};

}  // namespace meshtrain::serve
