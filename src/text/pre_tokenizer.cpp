#include "meshtrain/text/pre_tokenizer.h"

#include <algorithm>

#include "meshtrain/text/byte_level.h"
#include "meshtrain/text/normalizer.h"

namespace meshtrain::text {

namespace {

using Pieces = std::vector<std::string>;

// `p` cut at each match of `lit`, the match joined as `b` says; empty pieces dropped, as `tokenizers` does.
void split_literal(const std::string& p, const std::string& lit, PreTokenizeStep::Behavior b, Pieces& out) {
  using B = PreTokenizeStep::Behavior;
  const auto emit = [&](std::string s) {
    if (!s.empty()) out.push_back(std::move(s));
  };
  std::string carry;  // MergedWithNext: the match waiting for what follows it
  size_t pos = 0;
  for (size_t hit; !lit.empty() && (hit = p.find(lit, pos)) != std::string::npos; pos = hit + lit.size()) {
    std::string before = p.substr(pos, hit - pos);
    if (b == B::MergedWithPrevious) {
      emit(carry + before + lit);
      carry.clear();
      continue;
    }
    emit(carry + before);
    carry.clear();
    if (b == B::Isolated) emit(lit);
    if (b == B::MergedWithNext) carry = lit;
  }
  emit(carry + p.substr(pos));
}

void metaspace(std::string p, const PreTokenizeStep& s, bool at_start, Pieces& out) {
  std::string replaced = replace_literal(p, " ", s.literal);
  const bool starts = replaced.rfind(s.literal, 0) == 0;
  if (!replaced.empty() && !starts &&
      (s.prepend == PreTokenizeStep::Prepend::Always || (s.prepend == PreTokenizeStep::Prepend::First && at_start)))
    replaced.insert(0, s.literal);
  if (s.split) split_literal(replaced, s.literal, PreTokenizeStep::Behavior::MergedWithNext, out);
  else if (!replaced.empty()) out.push_back(std::move(replaced));
}

}  // namespace

std::vector<std::string> pre_tokenize(std::string_view text, const std::vector<PreTokenizeStep>& steps, bool at_start) {
  Pieces pieces{std::string(text)};
  bool byte_level = false;
  for (const PreTokenizeStep& s : steps) {
    Pieces next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& p = pieces[i];
      switch (s.kind) {
        case PreTokenizeStep::Kind::Metaspace: metaspace(std::move(p), s, at_start && i == 0, next); break;
        case PreTokenizeStep::Kind::SplitLiteral: split_literal(p, s.literal, s.behavior, next); break;
        case PreTokenizeStep::Kind::Split:
          for (std::string_view v : split_by_pattern(p, s.pattern)) next.emplace_back(v);
          break;
        case PreTokenizeStep::Kind::ByteLevel:
          byte_level = true;
          if (s.add_prefix_space && p.rfind(' ', 0) != 0) p.insert(0, " ");
          if (!s.use_regex) {
            next.push_back(std::move(p));
            break;
          }
          for (std::string_view v : split_by_pattern(p, SplitPattern::Gpt2)) next.emplace_back(v);
          break;
      }
    }
    pieces = std::move(next);
  }
  if (byte_level)
    for (std::string& p : pieces) p = bytes_to_symbols(p);
  return pieces;
}

}  // namespace meshtrain::text
