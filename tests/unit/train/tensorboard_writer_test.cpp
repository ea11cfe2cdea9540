// TensorBoard event files, checked byte by byte: TFRecord framing (length, masked CRC-32C of the length, data,
// masked CRC-32C of the data), the file_version record first, and the hand-encoded Event/Summary protobuf of
// a scalar. (tests/e2e/observe_test.py reads a trainer's file back with the tensorboard package itself.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/core/crc32.h"
#include "meshtrain/train/tensorboard_writer.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::train;

namespace {

uint32_t masked(const std::string& s) {
  const uint32_t c = crc32c(s.data(), s.size());
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

template <typename T>
T read_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

// The records of a TFRecord file, each checked against its two CRCs.
std::vector<std::string> records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string f = ss.str();
  std::vector<std::string> out;
  for (size_t at = 0; at < f.size();) {
    const auto len = read_le<uint64_t>(f, at);
    EXPECT_EQ(read_le<uint32_t>(f, at + 8), masked(f.substr(at, 8)));
    const std::string data = f.substr(at + 12, len);
    EXPECT_EQ(read_le<uint32_t>(f, at + 12 + len), masked(data));
    out.push_back(data);
    at += 12 + len + 4;
  }
  return out;
}

}  // namespace

TEST(TensorBoardWriter, FramingAndProtobufByteForByte) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const auto dir = testing_support::temp_dir("tb") / "events";
  std::string path;
  {
    TensorBoardWriter w(dir.string(), "logging.tensorboard");
    path = w.path();
    w.add_scalars(300, {{"loss", 2.5}}, 1.5);
  }
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto recs = records(path);
  ASSERT_EQ(recs.size(), 2u);
  // Event{wall_time=1 (fixed64), step=2 (varint 0), file_version=3 "brain.Event:2"}
  EXPECT_EQ(recs[0].substr(9), std::string("\x10\x00\x1a\x0d" "brain.Event:2", 17));
  // Event{wall_time 1.5, step 300 (varint ac 02), summary=5 {value=1 {tag=1 "loss", simple_value=2 2.5f}}}
  std::string want("\x09", 1);
  const double wall = 1.5;
  want.append(reinterpret_cast<const char*>(&wall), 8);
  want += std::string("\x10\xac\x02\x2a\x0d\x0a\x0b\x0a\x04loss\x15", 14);
  const float v = 2.5f;
  want.append(reinterpret_cast<const char*>(&v), 4);
  EXPECT_EQ(recs[1], want);
}

TEST(TensorBoardWriter, RecordsFlattenNestedNumbers) {
  const auto got = tensorboard_scalars(
      {{"step", 4}, {"loss", 1.0}, {"gpu", {{"1", {{"power_w", 300.0}, {"throttled", true}}}}}, {"ranks", {{"t", {0.5, 0.7}}}},
       {"note", "text"}});
  const std::vector<std::pair<std::string, double>> want = {
      {"gpu/1/power_w", 300.0}, {"gpu/1/throttled", 1.0}, {"loss", 1.0}, {"ranks/t/0", 0.5}, {"ranks/t/1", 0.7}};
  EXPECT_EQ(got, want);
}

TEST(TensorBoardWriter, UnwritableDirectoryIsAUserError) {
  const auto file = testing_support::temp_dir("tb_bad") / "file";
  std::ofstream(file) << "x";
  EXPECT_NE(testing_support::user_error([&] { TensorBoardWriter((file / "sub").string(), "logging.tensorboard"); })
                .find("logging.tensorboard: cannot create directory"),
            std::string::npos);
}
