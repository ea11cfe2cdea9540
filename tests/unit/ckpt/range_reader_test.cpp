// The parallel range reader against the plain one-pread-per-tensor path: the same bytes for every size
// (empty, smaller than a piece, many pieces, not a multiple of anything), the same checksums the writer
// computed (pieces' CRCs combined), and the errors a damaged file gives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "meshtrain/ckpt/range_reader.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/crc32.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;
namespace fs = std::filesystem;

namespace {

std::map<std::string, at::Tensor> odd_tensors() {
  at::manual_seed(3);
  return {{"a.empty", at::empty({0}, at::kFloat)},
          {"b.one", at::randn({1})},
          {"c.odd_bf16", at::randn({7, 333}).to(at::kBFloat16)},
          {"d.big", at::randn({3, 40001})},
          {"e.ints", at::randint(0, 1 << 30, {5, 1001}, at::kLong)}};
}

}  // namespace

TEST(CrcCombine, EqualsTheChecksumOfTheConcatenation) {
  std::vector<uint8_t> bytes(100003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4096}, size_t{77777}, bytes.size()}) {
    const size_t rest = bytes.size() - cut;
    EXPECT_EQ(crc32c_combine(crc32c(bytes.data(), cut), crc32c(bytes.data() + cut, rest), rest),
              crc32c(bytes.data(), bytes.size())) << cut;
    EXPECT_EQ(crc32_combine(crc32(bytes.data(), cut), crc32(bytes.data() + cut, rest), rest),
              crc32(bytes.data(), bytes.size())) << cut;
  }
}

TEST(RangeReader, SameBytesAndChecksumsAsOnePreadPerTensor) {
  const auto d = temp_dir("range_reader");
  const std::string path = (d / "t.safetensors").string();
  const auto written = ckpt::write_safetensors(path, odd_tensors());
  const ckpt::SafetensorsReader plain(path);
  // Pieces of 4 KiB over 3 threads: every tensor above a page is read in several pieces, out of order.
  for (uint64_t chunk : {uint64_t{4096}, uint64_t{4099}, uint64_t{8} << 20}) {
    std::map<std::string, at::Tensor> got;
    std::vector<ckpt::ReadRange> ranges;
    for (const auto& [name, e] : written) {
      got[name] = at::empty_like(plain.read(name));
      ranges.push_back({path, e.begin, e.end - e.begin, got[name].data_ptr(), name,
                        ckpt::ReadRange::Checksum::crc32c});
    }
    const auto stats = ckpt::read_ranges(ranges, {.chunk_bytes = chunk, .threads = 3});
    uint64_t total = 0;
    for (const auto& r : ranges) {
      total += r.length;
      EXPECT_EQ(r.crc, written.at(r.what).crc) << r.what << " chunk " << chunk;
      EXPECT_TRUE(at::equal(got[r.what], plain.read(r.what))) << r.what << " chunk " << chunk;
    }
    EXPECT_EQ(stats.bytes, total);
    if (chunk == 4096) {
      EXPECT_GT(stats.preads, written.size());
    }
  }
  // The import path: every tensor of the file, saved dtypes kept.
  const auto all = ckpt::read_safetensors({path});
  ASSERT_EQ(all.size(), written.size());
  for (const auto& [name, t] : all) {
    EXPECT_EQ(t.scalar_type(), plain.read(name).scalar_type()) << name;
    EXPECT_TRUE(at::equal(t, plain.read(name))) << name;
  }
}

TEST(RangeReader, DirectIoGivesTheSameBytes) {
  const auto d = temp_dir("range_reader_direct");
  const std::string path = (d / "t.safetensors").string();
  const auto written = ckpt::write_safetensors(path, odd_tensors());
  const ckpt::SafetensorsReader plain(path);
  // A page-aligned destination and offset: the pieces that qualify go through O_DIRECT where the file
  // system has it (tmpfs does not: then all of it is buffered), the rest buffered.
  const auto& e = written.at("d.big");
  const uint64_t begin = e.begin / 4096 * 4096, n = (e.end - begin) / 4096 * 4096;
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, n), 0);
  std::vector<ckpt::ReadRange> ranges{{path, begin, n, buf, "d.big", ckpt::ReadRange::Checksum::crc32c}};
  ckpt::read_ranges(ranges, {.chunk_bytes = 8192, .threads = 2, .direct = true});
  std::vector<uint8_t> want(n);
  std::vector<ckpt::ReadRange> plain_ranges{{path, begin, n, want.data(), "d.big"}};
  ckpt::read_ranges(plain_ranges, {.chunk_bytes = n, .threads = 1});
  EXPECT_EQ(std::memcmp(buf, want.data(), n), 0);
  EXPECT_EQ(ranges[0].crc, crc32c(want.data(), n));
  std::free(buf);
}

TEST(RangeReader, TruncatedFileNamesFileAndTensor) {
  const auto d = temp_dir("range_reader_trunc");
  const std::string path = (d / "t.safetensors").string();
  const auto written = ckpt::write_safetensors(path, odd_tensors());
  const auto& e = written.at("e.ints");
  std::vector<uint8_t> buf(e.end - e.begin);
  fs::resize_file(path, e.begin + 100);
  std::vector<ckpt::ReadRange> ranges{{path, e.begin, buf.size(), buf.data(), "e.ints"}};
  const std::string err = user_error([&] { ckpt::read_ranges(ranges, {.chunk_bytes = 4096, .threads = 2}); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("'e.ints' is truncated"), std::string::npos) << err;
  std::vector<ckpt::ReadRange> missing{{(d / "nope").string(), 0, 1, buf.data(), "x"}};
  EXPECT_NE(user_error([&] { ckpt::read_ranges(missing); }).find("cannot open"), std::string::npos);
}
