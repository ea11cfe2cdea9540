#include "meshtrain/text/split_pattern.h"

#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

namespace {

constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text as classified code points; matchers return the end index of a match starting at i (i = none).
struct Chars {
  std::vector<CodePoint> cps;
  std::vector<CharClass> cls;
  size_t n() const { return cps.size(); }
  char32_t at(size_t i) const { return i < n() ? cps[i].cp : 0; }
  bool is(size_t i, CharClass c) const { return i < n() && cls[i] == c; }
  size_t run(size_t i, CharClass c) const {
    while (is(i, c)) ++i;
    return i;
  }
};

char32_t fold(char32_t c, bool ignore_case) {
  if (!ignore_case) return c;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
  if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S case-folds to 's'
  return c;
}

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for Llama 3).
size_t contraction(const Chars& t, size_t i, bool ignore_case) {
  if (t.at(i) != '\'') return i;
  const char32_t a = fold(t.at(i + 1), ignore_case), b = fold(t.at(i + 2), ignore_case);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return i;
}

// \s+(?!\S)|\s+ : a run of white space, less its last character when a non-space follows (that one joins
// the next piece, e.g. the space before a word), unless the run is a single character.
size_t trailing_space(const Chars& t, size_t i) {
  if (!t.is(i, CharClass::Space)) return i;
  const size_t j = t.run(i, CharClass::Space);
  return (j == t.n() || j - i == 1) ? j : j - 1;
}

size_t match_gpt2(const Chars& t, size_t i) {
  if (size_t e = contraction(t, i, false); e > i) return e;
  const size_t k = t.at(i) == ' ' ? i + 1 : i;  // ` ?` before letters, numbers, others
  for (CharClass c : {CharClass::Letter, CharClass::Number, CharClass::Other})
    if (t.is(k, c)) return t.run(k, c);
  return trailing_space(t, i);
}

bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

size_t match_llama3(const Chars& t, size_t i, size_t max_digits) {
  if (size_t e = contraction(t, i, true); e > i) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (t.is(i, CharClass::Letter)) return t.run(i, CharClass::Letter);
  if (i < t.n() && !is_newline(t.at(i)) && !t.is(i, CharClass::Number) && t.is(i + 1, CharClass::Letter))
    return t.run(i + 1, CharClass::Letter);
  // \p{N}{1,max}
  if (t.is(i, CharClass::Number)) {
    size_t e = i;
    while (e - i < max_digits && t.is(e, CharClass::Number)) ++e;
    return e;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  if (const size_t k = t.at(i) == ' ' ? i + 1 : i; t.is(k, CharClass::Other)) {
    size_t e = t.run(k, CharClass::Other);
    while (e < t.n() && is_newline(t.at(e))) ++e;
    return e;
  }
  if (!t.is(i, CharClass::Space)) return i;
  // \s*[\r\n]+ : \s* backs off to the last newline of the run, [\r\n]+ takes it.
  const size_t j = t.run(i, CharClass::Space);
  for (size_t p = j; p > i; --p)
    if (is_newline(t.at(p - 1))) return p;
  return trailing_space(t, i);
}

}  // namespace

std::optional<SplitPattern> recognise_split_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::Gpt2, SplitPattern::Llama3, SplitPattern::Qwen2})
    if (regex == split_pattern_regex(p)) return p;
  return std::nullopt;
}

std::string_view split_pattern_regex(SplitPattern p) {
  switch (p) {
    case SplitPattern::Gpt2: return kGpt2;
    case SplitPattern::Llama3: return kLlama3;
    case SplitPattern::Qwen2: return kQwen2;
  }
  return {};
}

std::vector<std::string_view> split_by_pattern(std::string_view text, SplitPattern p) {
  Chars t;
  t.cps = decode_utf8(text);
  t.cls.reserve(t.n());
  for (const auto& c : t.cps) t.cls.push_back(char_class(c.cp));
  const auto offset = [&](size_t i) { return i < t.n() ? t.cps[i].offset : text.size(); };
  std::vector<std::string_view> out;
  size_t gap = 0;  // start of a stretch no alternative matched (none of these patterns leaves one)
  for (size_t i = 0; i < t.n();) {
    const size_t e = p == SplitPattern::Gpt2 ? match_gpt2(t, i) : match_llama3(t, i, p == SplitPattern::Llama3 ? 3 : 1);
    if (e == i) {
      ++i;
      continue;
    }
    if (gap < i) out.push_back(text.substr(offset(gap), offset(i) - offset(gap)));
    out.push_back(text.substr(offset(i), offset(e) - offset(i)));
    i = gap = e;
  }
  if (gap < t.n()) out.push_back(text.substr(offset(gap)));
  return out;
}

}  // namespace meshtrain::text
