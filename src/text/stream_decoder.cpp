#include "meshtrain/text/stream_decoder.h"

#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

std::string StreamDecoder::step(int64_t id) {
  if (pieces_) {
    const std::optional<std::string> t = tok_.token_string(id, skip_special_);
    return t ? pieces_->push(*t) : std::string();
  }
  pending_ += tok_.token_bytes(id, skip_special_);
  // Hand out everything up to an unfinished sequence at the end (one that more bytes could complete).
  size_t cut = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const size_t i = pending_.size() - back;
    const auto b = static_cast<unsigned char>(pending_[i]);
    if (b < 0x80) break;                  // ASCII: nothing unfinished after it
    if (b >= 0xC0) {                      // a lead byte: unfinished if it is a valid start cut short
      if (utf8_sequence_length(pending_, i) == -1) cut = i;
      break;
    }
  }
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

void StreamDecoder::continue_after(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) step(id);
  // What the prompt still held back belongs to the prompt, which was printed whole.
  pending_.clear();
  if (pieces_) pieces_->finish();
}

std::string StreamDecoder::finish() {
  if (pieces_) return pieces_->finish();
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace meshtrain::text
