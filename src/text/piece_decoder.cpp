#include "meshtrain/text/piece_decoder.h"

#include "meshtrain/text/normalizer.h"
#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

namespace {

// <0xNN> (either case of hex digit) → the byte, else -1; `tokenizers` reads exactly six-character tokens.
int byte_token(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_sequence_length(s, i);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string PieceDecoder::strip(std::string piece) {
  if (steps_.strip_start == 0 || steps_.strip_content.empty()) return piece;
  if (!started_ || !steps_.fuse) {  // without Fuse every token is stripped on its own
    started_ = true;
    strip_left_ = steps_.strip_start;
  }
  const std::string& c = steps_.strip_content;
  size_t cut = 0;
  while (strip_left_ > 0 && piece.compare(cut, c.size(), c) == 0) {
    cut += c.size();
    --strip_left_;
  }
  if (cut < piece.size()) strip_left_ = 0;  // the text has begun: nothing more leaves its start
  return piece.substr(cut);
}

std::string PieceDecoder::flush_bytes() {
  if (bytes_.empty()) return "";
  std::string out;
  if (valid_utf8(bytes_)) {
    out = strip(bytes_);
  } else {
    for (size_t i = 0; i < bytes_.size(); ++i) out += strip("\xEF\xBF\xBD");  // one U+FFFD per byte
  }
  bytes_.clear();
  return out;
}

std::string PieceDecoder::push(std::string_view token) {
  std::string t(token);
  for (const auto& [from, to] : steps_.replace) t = replace_literal(t, from, to);
  if (!steps_.metaspace.empty()) t = replace_literal(t, steps_.metaspace, index_ == 0 && steps_.metaspace_drop_first ? "" : " ");
  ++index_;
  if (steps_.byte_fallback) {
    if (const int b = byte_token(t); b >= 0) {
      bytes_.push_back(static_cast<char>(b));
      return "";
    }
  }
  std::string out = flush_bytes();
  return out + strip(std::move(t));
}

std::string PieceDecoder::finish() { return flush_bytes(); }

}  // namespace meshtrain::text
