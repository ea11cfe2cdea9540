// The decoders of SentencePiece-style tokenizer.json files (Llama 2, Mistral, Gemma), token by token: each
// token's text goes through `Replace` ("▁" → " ") or `Metaspace` (the same, the first token's "▁" dropped),
// then `ByteFallback` (a run of <0xNN> tokens becomes its bytes when they are valid UTF-8, else one U+FFFD per
// byte), `Fuse` and `Strip` (up to `strip_start` leading `strip_content` characters off the text, or off each
// token without Fuse) — the `tokenizers` decode chain in that order. Used for whole-sequence decoding and for
// streaming alike, so both give the same text: a run of byte tokens is held back until a token that is not
// one ends it (a later byte can still turn the whole run into U+FFFDs), everything else is handed out at once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshtrain::text {

struct PieceDecoding {
  std::vector<std::pair<std::string, std::string>> replace;  // per token, in order: pattern → content
  std::string metaspace;        // non-empty: the Metaspace decoder's replacement ("▁")
  bool metaspace_drop_first = true;  // the first token's replacement characters are dropped (prepend_scheme ≠ never)
  bool byte_fallback = false;
  bool fuse = false;
  std::string strip_content;    // Strip: the character (UTF-8) and how many may go from the start
  size_t strip_start = 0;
};

class PieceDecoder {
 public:
  explicit PieceDecoder(const PieceDecoding& steps) : steps_(steps) {}

  // The text that `token` (a token's string, special tokens already left out) makes final.
  std::string push(std::string_view token);
  // What is still held back (a run of byte tokens); the decoder may go on after it.
  std::string finish();

 private:
  std::string flush_bytes();
  std::string strip(std::string piece);

  const PieceDecoding& steps_;
  size_t index_ = 0;           // tokens seen (Metaspace treats the first apart)
  std::string bytes_;          // the run of byte tokens held back
  size_t strip_left_ = 0;      // with Fuse: leading characters the text may still lose
  bool started_ = false;
};

}  // namespace meshtrain::text
