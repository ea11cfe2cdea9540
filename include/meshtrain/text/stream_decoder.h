// Decoding while tokens are sampled: each token's bytes are added as it comes, and only complete UTF-8 is
// handed out, so a character split over two tokens (an emoji, a CJK character) appears once it is whole,
// never as two replacement characters. Bytes that can never be valid become U+FFFD as `tokenizers` decodes
// them; what is still pending at the end is flushed the same way. A SentencePiece-style tokenizer's tokens go
// through its decoder chain (text/piece_decoder.h), which holds back a run of byte-fallback tokens until it
// ends. The pieces concatenate to decode(ids).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/text/tokenizer.h"

namespace meshtrain::text {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = true)
      : tok_(tok), skip_special_(skip_special_tokens) {
    if (const PieceDecoding* steps = tok.piece_decoding()) pieces_.emplace(*steps);
  }

  // The text that token `id` completes (possibly empty).
  std::string step(int64_t id);
  // Goes on from `ids` (a prompt already printed) without handing out their text: what follows is decoded
  // as the rest of one sequence, not as its start (a SentencePiece-style decoder strips the start's space).
  void continue_after(const std::vector<int64_t>& ids);
  // Whatever is still held back (an unfinished sequence), replaced by U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // bytes not handed out yet: the start of a sequence that may still complete
  std::optional<PieceDecoder> pieces_;  // a SentencePiece-style tokenizer's decoder chain
};

}  // namespace meshtrain::text
