// SseParser (serve/http/sse_parser.h): the event-stream framing as the standard reads it, whatever pieces the
// bytes arrive in: data lines joined, the three line ends (a CRLF split between pieces is one line end),
// comments, event types, events without data, a byte-order mark, an unfinished event kept back.
#include "meshtrain/serve/http/sse_parser.h"

#include <gtest/gtest.h>

namespace meshtrain::serve::http {
namespace {

// "type:data" per event, joined with '|'.
std::string events_text(const std::vector<SseEvent>& events) {
  std::string out;
  for (const auto& e : events) out += (out.empty() ? "" : "|") + e.type + ":" + e.data;
  return out;
}

std::string parse_pieces(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<SseEvent> all;
  for (const auto& piece : pieces) {
    auto got = p.feed(piece);
    all.insert(all.end(), got.begin(), got.end());
  }
  return events_text(all);
}

// meshtrain serve's stream: JSON chunks, then [DONE].
const std::string kStream =
    "data: {\"choices\": [{\"token_ids\": [5]}]}\n\ndata: {\"choices\": [{\"token_ids\": [6, 7]}]}\n\n"
    "data: [DONE]\n\n";
const std::string kEvents =
    "message:{\"choices\": [{\"token_ids\": [5]}]}|message:{\"choices\": [{\"token_ids\": [6, 7]}]}|message:[DONE]";

TEST(SseParser, WholeStreamAtOnce) { EXPECT_EQ(parse_pieces({kStream}), kEvents); }

TEST(SseParser, AnySplitIntoTwoOrIntoBytesGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut)
    EXPECT_EQ(parse_pieces({kStream.substr(0, cut), kStream.substr(cut)}), kEvents) << "cut at " << cut;
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_EQ(parse_pieces(bytes), kEvents);
}

TEST(SseParser, EventsComeOutWhenTheBlankLineArrivesNotBefore) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: a\n").empty());
  EXPECT_TRUE(p.feed("data: b\n").empty());
  EXPECT_EQ(events_text(p.feed("\n")), "message:a\nb");
  EXPECT_TRUE(p.feed("data: unfinished\n").empty());  // the stream may end here: the event is never dispatched
}

TEST(SseParser, CrLfAndCrAndLfAllEndALine) {
  EXPECT_EQ(parse_pieces({"data: a\r\n\r\ndata: b\r\rdata: c\n\n"}), "message:a|message:b|message:c");
  // A CRLF cut between two pieces is one line end, not a line end and a blank line (which would end the event).
  EXPECT_EQ(parse_pieces({"data: a\r", "\ndata: b\r", "\n\r", "\n"}), "message:a\nb");
}

TEST(SseParser, OneSpaceAfterTheColonIsDroppedAndNoMore) {
  EXPECT_EQ(parse_pieces({"data:x\n\ndata:  y\n\ndata: z: w\n\n"}), "message:x|message: y|message:z: w");
}

TEST(SseParser, DataWithoutAColonIsAnEmptyLine) {
  EXPECT_EQ(parse_pieces({"data\ndata\n\n"}), "message:\n");
  EXPECT_EQ(parse_pieces({"data:\n\n"}), "message:");  // an empty data line still makes an event
}

TEST(SseParser, CommentsAndUnknownFieldsAreIgnored) {
  EXPECT_EQ(parse_pieces({": keep-alive\nid: 3\nretry: 10\nfoo: bar\ndata: a\n\n"}), "message:a");
}

TEST(SseParser, EventTypeAppliesToItsEventOnly) {
  EXPECT_EQ(parse_pieces({"event: error\ndata: x\n\ndata: y\n\n"}), "error:x|message:y");
}

TEST(SseParser, AnEventWithoutDataIsNotDispatchedAndItsTypeIsForgotten) {
  EXPECT_EQ(parse_pieces({"event: ping\n\n\n\ndata: y\n\n"}), "message:y");
}

TEST(SseParser, ByteOrderMarkAtTheStartIsSkippedEvenWhenSplit) {
  EXPECT_EQ(parse_pieces({"\xEF\xBB", "\xBF" "data: a\n\n"}), "message:a");
  EXPECT_EQ(parse_pieces({"data: \xEF\xBB\xBF\n\n"}), "message:\xEF\xBB\xBF");  // elsewhere it is data
}

}  // namespace
}  // namespace meshtrain::serve::http
