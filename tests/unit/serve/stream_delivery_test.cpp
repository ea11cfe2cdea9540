// StreamDelivery (serve/engine/stream_delivery.h): updates posted from one thread reach their streams in the order
// posted, a token never after its stream's end; flush() returns once all are appended; close() appends what is
// queued, and a post after it is appended at once. RequestStream::append: tokens and an end in one part, and
// nothing after the end.
#include "meshtrain/serve/engine/stream_delivery.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "stream_reader.h"

namespace meshtrain::serve {
namespace {

using testing::read_to_end;

TEST(RequestStream, AppendTakesTokensAndAnEndInOnePartAndNothingAfterTheEnd) {
  RequestStream s;
  s.append({.tokens = {4, 5}});
  s.append({.tokens = {6}, .finish = FinishReason::kLength});
  s.append({.tokens = {7}});       // after the end: dropped
  s.fail("too late", true);        // the end stays the first one
  const StreamPart p = s.next();
  EXPECT_EQ(p.tokens, (std::vector<TokenId>{4, 5, 6}));
  ASSERT_TRUE(p.finish);
  EXPECT_EQ(*p.finish, FinishReason::kLength);
  EXPECT_TRUE(p.error.empty());
  EXPECT_FALSE(p.rejected);
}

TEST(StreamDelivery, EachStreamGetsItsTokensInOrderAndThenItsEnd) {
  constexpr int kStreams = 16, kSteps = 200;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_shared<RequestStream>());
  std::vector<std::vector<TokenId>> got(kStreams);
  std::vector<StreamPart> ends(kStreams);
  std::vector<std::thread> readers;
  for (int i = 0; i < kStreams; ++i)
    readers.emplace_back([&, i] { std::tie(got[i], ends[i]) = read_to_end(*streams[i]); });
  {
    StreamDelivery delivery;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<StreamDelivery::Update> updates;
      for (int i = 0; i < kStreams; ++i) {
        StreamPart part{.tokens = {static_cast<TokenId>(step)}};
        if (step == kSteps - 1 - i) part.finish = FinishReason::kStop;  // stream i ends i steps before the last
        if (step <= kSteps - 1 - i) updates.push_back({streams[i], std::move(part)});
      }
      delivery.post(std::move(updates));
    }
  }  // the destructor appends what is still queued
  for (auto& t : readers) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(kSteps - i)) << "stream " << i;
    for (int step = 0; step < kSteps - i; ++step) EXPECT_EQ(got[i][step], step) << "stream " << i;
    EXPECT_EQ(*ends[i].finish, FinishReason::kStop);
  }
}

TEST(StreamDelivery, FlushReturnsOnceEverythingPostedIsAppended) {
  auto s = std::make_shared<RequestStream>();
  StreamDelivery delivery;
  for (TokenId t = 0; t < 100; ++t) delivery.post({{s, {.tokens = {t}}}});
  delivery.post({{s, {.finish = FinishReason::kAborted, .error = "gone"}}});
  delivery.flush();
  // All of it is in the stream now: one part, without waiting.
  const std::optional<StreamPart> p = s->next_within(std::chrono::milliseconds(0));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tokens.size(), 100u);
  EXPECT_EQ(p->error, "gone");
}

TEST(StreamDelivery, AfterCloseAPostIsAppendedAtOnce) {
  auto s = std::make_shared<RequestStream>();
  StreamDelivery delivery;
  delivery.post({{s, {.tokens = {1}}}});
  delivery.close();
  delivery.close();  // idempotent
  delivery.post({{s, {.tokens = {2}, .finish = FinishReason::kLength}}});
  const std::optional<StreamPart> p = s->next_within(std::chrono::milliseconds(0));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tokens, (std::vector<TokenId>{1, 2}));
  EXPECT_EQ(*p->finish, FinishReason::kLength);
  delivery.flush();  // returns: nothing is queued
}

}  // namespace
}  // namespace meshtrain::serve
