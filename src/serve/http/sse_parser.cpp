#include "meshtrain/serve/http/sse_parser.h"

namespace meshtrain::serve::http {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (const char c : bytes) {
    const bool lf_after_cr = c == '\n' && after_cr_;
    after_cr_ = c == '\r';
    if (lf_after_cr) continue;  // CRLF: the CR already ended the line
    if (c == '\r' || c == '\n') end_line(out);
    else line_ += c;
  }
  return out;
}

void SseParser::end_line(std::vector<SseEvent>& out) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  std::string_view line = line_;
  if (first_line_ && line.starts_with(kBom)) line.remove_prefix(kBom.size());
  first_line_ = false;
  if (line.empty()) {  // a blank line ends the event
    if (has_data_) {
      data_.pop_back();  // the "\n" after the last data line
      out.push_back({type_.empty() ? "message" : type_, std::move(data_)});
    }
    type_.clear();
    data_.clear();
    has_data_ = false;
  } else if (line.front() != ':') {  // ':' opens a comment
    const size_t colon = line.find(':');
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    field(line.substr(0, colon), value);
  }
  line_.clear();
}

void SseParser::field(std::string_view name, std::string_view value) {
  if (name == "data") {
    (data_ += value) += '\n';
    has_data_ = true;
  } else if (name == "event") {
    type_ = value;
  }
}

}  // namespace meshtrain::serve::http
