#include "meshtrain/text/added_tokens.h"

#include <algorithm>

#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

namespace {

// Whether the last / first code point of `s` is a word character.
bool ends_with_word(std::string_view s) {
  auto cps = decode_utf8(s.substr(s.size() > 4 ? s.size() - 4 : 0));
  return !cps.empty() && is_word_char(cps.back().cp);
}
bool starts_with_word(std::string_view s) {
  auto cps = decode_utf8(s.substr(0, 4));
  return !cps.empty() && is_word_char(cps.front().cp);
}

// Where the white space around [start, stop) ends, left or right.
size_t strip_left(std::string_view s, size_t start, size_t floor) {
  auto cps = decode_utf8(s.substr(floor, start - floor));
  size_t i = cps.size();
  while (i > 0 && char_class(cps[i - 1].cp) == CharClass::Space) --i;
  return floor + (i == cps.size() ? start - floor : cps[i].offset);
}
size_t strip_right(std::string_view s, size_t stop) {
  for (const CodePoint& c : decode_utf8(s.substr(stop)))
    if (char_class(c.cp) != CharClass::Space) return stop + c.offset;
  return s.size();
}

}  // namespace

AddedTokens::AddedTokens(std::vector<AddedToken> tokens, const std::vector<NormalizeStep>& normalize)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_id_[tokens_[i].id] = i;
    match_.push_back(tokens_[i].normalized ? text::normalize(tokens_[i].content, normalize) : tokens_[i].content);
    if (match_[i].empty()) continue;
    Index& index = tokens_[i].normalized ? normalized_ : raw_;
    index[static_cast<unsigned char>(match_[i][0])].push_back(i);
  }
  for (Index* index : {&raw_, &normalized_})
    for (auto& [_, list] : *index)
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return match_[a].size() > match_[b].size(); });
}

const AddedToken* AddedTokens::by_id(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::by_content(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return &t;
  return nullptr;
}

void AddedTokens::split_pass(const Index& index, std::string_view text, std::vector<TextPiece>& out) const {
  size_t done = 0;  // text before this is already in `out`
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    if (auto it = index.find(static_cast<unsigned char>(text[i])); it != index.end())
      for (size_t k : it->second)
        if (text.compare(i, match_[k].size(), match_[k]) == 0) {
          hit = &tokens_[k];
          break;
        }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + matched(*hit).size();
    i = stop;  // the search goes on after this match whether or not it is used
    if (hit->single_word && (ends_with_word(text.substr(0, start)) || starts_with_word(text.substr(stop))))
      continue;
    if (hit->lstrip) start = strip_left(text, start, done);
    if (hit->rstrip) stop = i = strip_right(text, stop);
    if (done < start) out.push_back({std::nullopt, text.substr(done, start - done)});
    out.push_back({hit->id, text.substr(start, stop - start)});
    done = stop;
  }
  if (done < text.size()) out.push_back({std::nullopt, text.substr(done)});
}

std::vector<TextPiece> AddedTokens::split_raw(std::string_view text) const {
  std::vector<TextPiece> out;
  split_pass(raw_, text, out);
  return out;
}

std::vector<TextPiece> AddedTokens::split_normalized(std::string_view text) const {
  std::vector<TextPiece> out;
  if (normalized_.empty()) out.push_back({std::nullopt, text});
  else split_pass(normalized_, text, out);
  return out;
}

std::vector<TextPiece> AddedTokens::split(std::string_view text) const {
  std::vector<TextPiece> first, out;
  split_pass(raw_, text, first);
  for (const TextPiece& p : first) {
    if (p.token || normalized_.empty()) {
      out.push_back(p);
    } else {
      split_pass(normalized_, p.text, out);
    }
  }
  return out;
}

}  // namespace meshtrain::text
