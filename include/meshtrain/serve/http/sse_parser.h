// SseParser: the framing of server-sent events (`text/event-stream`, the "event stream interpretation" of the
// WHATWG HTML standard), parsed incrementally for `meshtrain bench serve`'s client (docs/serving.md "meshtrain
// bench serve"). HTTP's own framing (chunked transfer encoding) is Beast's; what arrives here is the body as it
// comes, cut anywhere: in the middle of a line, of a field name, or between the CR and the LF of one line break.
//
// The rules kept: a line ends at CRLF, LF or CR; a blank line ends an event; `data` lines are joined with "\n";
// one space after the colon is dropped; a line starting with ':' is a comment; `event` names the event's type;
// a line without a colon is a field with an empty value; unknown fields (and `id`, `retry`) are ignored; an event
// without any `data` line is not dispatched; a UTF-8 byte-order mark at the very start is skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::serve::http {

struct SseEvent {
  std::string type = "message";  // the `event` field's value, "message" when there is none
  std::string data;              // the `data` lines joined with "\n"
};

class SseParser {
 public:
  // Appends `bytes` (any piece of the stream); returns the events they complete, in order. An event not yet
  // ended by a blank line waits for the bytes that end it (the standard drops it if the stream ends first).
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void end_line(std::vector<SseEvent>& out);
  void field(std::string_view name, std::string_view value);

  std::string line_;         // the current line, not yet ended
  bool after_cr_ = false;    // the previous byte was a CR: an LF now belongs to the same line break
  bool first_line_ = true;   // a byte-order mark may open it
  std::string type_;         // the event being built: its type, its data lines (each followed by "\n")
  std::string data_;
  bool has_data_ = false;
};

}  // namespace meshtrain::serve::http
