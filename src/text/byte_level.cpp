#include "meshtrain/text/byte_level.h"

#include <array>

#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 256 + 68> from_char{};  // 256 − 188 printable bytes = 68 code points above U+00FF
  Tables() {
    from_char.fill(-1);
    char32_t next = 256;  // the non-printable bytes, in byte order, take U+0100, U+0101, …
    for (int b = 0; b < 256; ++b) {
      to_char[static_cast<size_t>(b)] = printable(b) ? static_cast<char32_t>(b) : next++;
      append_utf8(to_utf8[static_cast<size_t>(b)], to_char[static_cast<size_t>(b)]);
      from_char[to_char[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) { return cp < tables().from_char.size() ? tables().from_char[cp] : -1; }

std::string bytes_to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += tables().to_utf8[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace meshtrain::text
