// The store's request parser on garbage: every bad length or count is refused at once, in words, before any
// allocation; a short buffer is "incomplete", never an error.
#include "meshtrain/launch/store_request.h"

#include <gtest/gtest.h>

using namespace meshtrain::launch;

namespace {

template <typename T>
void put_raw(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

ParseStatus parse_bytes(const std::string& b, StoreRequest& r, std::string& problem) {
  size_t used = 0;
  return parse_store_request(b.data(), b.size(), r, used, problem);
}

}  // namespace

TEST(StoreRequest, ParsesASet) {
  std::string b;
  put_raw<uint8_t>(b, 1);
  put_raw<uint64_t>(b, 2);
  b += "/k";
  put_raw<uint64_t>(b, 3);
  b += "abc";
  StoreRequest r;
  std::string problem;
  size_t used = 0;
  ASSERT_EQ(parse_store_request(b.data(), b.size(), r, used, problem), ParseStatus::Complete);
  EXPECT_EQ(used, b.size());
  EXPECT_EQ(r.query, StoreQuery::SET);
  EXPECT_EQ(r.keys.at(0), "/k");
  EXPECT_EQ(r.values.at(0), "abc");
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_EQ(parse_store_request(b.data(), n, r, used, problem), ParseStatus::Incomplete) << n;
}

TEST(StoreRequest, RefusesHugeLengthsAtOnce) {
  std::string b;
  put_raw<uint8_t>(b, 1);
  put_raw<uint64_t>(b, uint64_t{1} << 63);
  StoreRequest r;
  std::string problem;
  EXPECT_EQ(parse_bytes(b, r, problem), ParseStatus::Malformed);
  EXPECT_NE(problem.find("a key of 9223372036854775808 bytes"), std::string::npos) << problem;
}

TEST(StoreRequest, RefusesHugeKeyCounts) {
  std::string b;
  put_raw<uint8_t>(b, 6);  // WAIT
  put_raw<uint64_t>(b, uint64_t{1} << 40);
  StoreRequest r;
  std::string problem;
  EXPECT_EQ(parse_bytes(b, r, problem), ParseStatus::Malformed);
  EXPECT_NE(problem.find("a request for 1099511627776 keys"), std::string::npos) << problem;
}

TEST(StoreRequest, RefusesUnknownQueries) {
  StoreRequest r;
  std::string problem;
  EXPECT_EQ(parse_bytes(std::string(1, '\x7f'), r, problem), ParseStatus::Malformed);
  EXPECT_EQ(problem, "unknown query type 127");
}
