#include "meshtrain/text/unicode.h"

#include <algorithm>

#include "unicode_table.h"

namespace meshtrain::text {

namespace {

const detail::CodeRange* find_range(const detail::CodeRange* begin, const detail::CodeRange* end, char32_t cp) {
  auto it = std::upper_bound(begin, end, cp, [](char32_t c, const detail::CodeRange& r) { return c < r.lo; });
  if (it == begin || cp > (it - 1)->hi) return nullptr;
  return it - 1;
}

}  // namespace

bool is_word_char(char32_t cp) {
  return find_range(std::begin(detail::kWordRanges), std::end(detail::kWordRanges), cp) != nullptr;
}

CharClass char_class(char32_t cp) {
  if (cp < 0x80) {  // the common case without the search
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::Space;
    return CharClass::Other;
  }
  const detail::CodeRange* r = find_range(std::begin(detail::kUnicodeRanges), std::end(detail::kUnicodeRanges), cp);
  return r ? r->cls : CharClass::Other;
}

int utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte (tighter for some leads: no overlongs,
  if (c >= 0xC2 && c <= 0xDF) {        // no surrogates, nothing above U+10FFFF)
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -1;
    const unsigned char x = b(i + static_cast<size_t>(k));
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return 0;
  }
  return n;
}

namespace {

char32_t code_point_at(std::string_view s, size_t i, int n) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Bytes of the maximal prefix of a valid sequence at s[i] (at least 1): what one U+FFFD replaces.
size_t invalid_span(std::string_view s, size_t i) {
  // Grow the candidate while it is still a valid prefix (utf8_sequence_length of the shorter string is -1).
  size_t len = 1;
  while (i + len < s.size() && len < 4 && utf8_sequence_length(s.substr(0, i + len + 1), i) == -1) ++len;
  return len;
}

}  // namespace

std::vector<CodePoint> decode_utf8(std::string_view s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_sequence_length(s, i);
    if (n > 0) {
      out.push_back({code_point_at(s, i, n), static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
      i += static_cast<size_t>(n);
    } else {
      out.push_back({0xFFFD, static_cast<uint32_t>(i), 1});
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int n = utf8_sequence_length(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      append_utf8(out, 0xFFFD);
      i += invalid_span(bytes, i);
    }
  }
  return out;
}

}  // namespace meshtrain::text
