#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/glob.h"
#include "meshtrain/core/log.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/token_shard.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;
namespace fs = std::filesystem;

namespace {

std::vector<uint16_t> iota_tokens(size_t n, uint16_t start = 0) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(start + i);
  return t;
}

}  // namespace

TEST(TokenShard, LlmcRoundTripAndRawFormats) {
  auto d = temp_dir("roundtrip");
  data::write_llmc_shard((d / "a.bin").string(), iota_tokens(1000, 7));
  data::TokenShard s((d / "a.bin").string(), data::ShardFormat::Auto);
  ASSERT_EQ(s.size(), 1000);
  std::vector<int64_t> out(5);
  s.read(995, 5, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{1002, 1003, 1004, 1005, 1006}));

  std::vector<uint32_t> raw = {70000, 1, 2};
  std::ofstream((d / "r32.bin").string(), std::ios::binary).write(reinterpret_cast<char*>(raw.data()), 12);
  data::TokenShard r((d / "r32.bin").string(), data::ShardFormat::U32);
  ASSERT_EQ(r.size(), 3);
  r.read(0, 1, out.data());
  EXPECT_EQ(out[0], 70000);
  data::TokenShard r16((d / "r32.bin").string(), data::ShardFormat::Auto);  // no magic → uint16
  EXPECT_EQ(r16.size(), 6);
}

TEST(TokenShard, LlmcVersion2HoldsUint32Tokens) {
  auto d = temp_dir("v2");
  std::vector<int32_t> header(256, 0);
  header[0] = data::kLlmcMagic;
  header[1] = 2;
  header[2] = 3;
  const std::vector<uint32_t> tokens = {128000, 5, 128255};
  {
    std::ofstream f((d / "a.bin").string(), std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(tokens.data()), 12);
  }
  data::TokenShard s((d / "a.bin").string(), data::ShardFormat::Auto);
  ASSERT_EQ(s.size(), 3);
  std::vector<int64_t> out(3);
  s.read(0, 3, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{128000, 5, 128255}));
}

TEST(TokenShard, ErrorsNameTheFile) {
  auto d = temp_dir("errors");
  auto p = (d / "t.bin").string();
  data::write_llmc_shard(p, iota_tokens(100));
  fs::resize_file(p, 1024 + 50);  // header + 25 tokens of 100
  auto msg = user_error([&] { data::TokenShard(p, data::ShardFormat::Auto); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated llm.c shard: header says 100 tokens"), std::string::npos) << msg;

  std::vector<int32_t> bad(256, 0);
  bad[0] = 12345;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<char*>(bad.data()), 1024);
  msg = user_error([&] { data::TokenShard(p, data::ShardFormat::LlmC); });
  EXPECT_NE(msg.find("not an llm.c token shard: magic 12345, expected 20240520"), std::string::npos) << msg;

  msg = user_error([&] { data::TokenShard((d / "nope.bin").string(), data::ShardFormat::Auto); });
  EXPECT_NE(msg.find("nope.bin: cannot open token shard"), std::string::npos) << msg;
  msg = user_error([&] { expand_glob((d / "*.none").string(), "data.val"); });
  EXPECT_NE(msg.find("data.val: '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matches no file"), std::string::npos) << msg;

  std::ofstream((d / "odd.bin").string(), std::ios::binary) << "abc";
  msg = user_error([&] { data::TokenShard((d / "odd.bin").string(), data::ShardFormat::U16); });
  EXPECT_NE(msg.find("not a multiple of 2"), std::string::npos) << msg;
}

TEST(TokenShard, AutoRefusesAnLlmcHeaderWithAnotherMagic) {
  auto d = temp_dir("magic");
  const std::string p = (d / "t.bin").string();
  data::write_llmc_shard(p, iota_tokens(100));
  for (auto [at, value] : {std::pair{0, 20240521}, std::pair{1, 3}}) {  // a wrong magic; a wrong version
    std::vector<int32_t> header(256);
    {
      std::ifstream(p, std::ios::binary).read(reinterpret_cast<char*>(header.data()), 1024);
    }
    header[0] = data::kLlmcMagic;
    header[1] = 1;
    header[at] = value;
    std::fstream(p, std::ios::binary | std::ios::in | std::ios::out).write(reinterpret_cast<char*>(header.data()), 1024);
    auto msg = user_error([&] { data::TokenShard(p, data::ShardFormat::Auto); });
    EXPECT_NE(msg.find(p + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(at == 0 ? "has an llm.c header (1024 bytes, zero-padded) with magic 20240521 and version 1; "
                                 "valid: magic 20240520 with version 1"
                               : "llm.c shard version 3 is not supported"),
              std::string::npos) << msg;
  }
  // Raw tokens that merely start with a large value stay uint16.
  std::vector<uint16_t> raw = iota_tokens(600, 1);
  std::ofstream((d / "raw.bin").string(), std::ios::binary).write(reinterpret_cast<char*>(raw.data()), 1200);
  EXPECT_EQ(data::TokenShard((d / "raw.bin").string(), data::ShardFormat::Auto).size(), 600);
  // The user's way out: name the format.
  EXPECT_EQ(data::TokenShard(p, data::ShardFormat::U16).size(), 512 + 100);
}

TEST(TokenShard, LlmcHeaderCountMustBeTheFilesTokens) {
  auto d = temp_dir("count");
  const std::string p = (d / "t.bin").string();
  auto with_count = [&](int32_t count) {
    data::write_llmc_shard(p, iota_tokens(20000));
    std::fstream(p, std::ios::binary | std::ios::in | std::ios::out).seekp(8).write(reinterpret_cast<char*>(&count), 4);
  };
  with_count(15000);  // the last 5000 tokens would never be read
  auto msg = user_error([&] { data::TokenShard(p, data::ShardFormat::Auto); });
  EXPECT_NE(msg.find(p + ": llm.c header says 15000 tokens (31024 bytes with the header), but the file has 41024 "
                     "bytes (20000 tokens)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  with_count(25000);  // more than the file holds
  msg = user_error([&] { data::TokenShard(p, data::ShardFormat::LlmC); });
  EXPECT_NE(msg.find(p + ": truncated llm.c shard: header says 25000 tokens (51024 bytes with the header), file has "
                     "41024 bytes (20000 tokens)"), std::string::npos) << msg;
  with_count(20000);
  EXPECT_EQ(data::TokenShard(p, data::ShardFormat::Auto).size(), 20000);
}

TEST(DataLoader, AutoNamesTheShardsItReadsAsRawUint16OnceForAllShards) {
  auto d = temp_dir("rawlog");
  const std::vector<uint16_t> raw = iota_tokens(600, 0);  // magic 0: no llm.c header
  for (const char* name : {"a.bin", "b.bin", "c.bin"})
    std::ofstream((d / name).string(), std::ios::binary).write(reinterpret_cast<const char*>(raw.data()), 1200);
  data::write_llmc_shard((d / "d.bin").string(), iota_tokens(600));
  log::init({.level = log::Level::Info});
  testing::internal::CaptureStderr();
  data::DataLoader loader({.sources = {{(d / "*.bin").string()}}, .seq_len = 10, .batch_size = 2});
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("data.train: " + (d / "a.bin").string() + " and 2 more of 4 shards read as raw uint16 (no "
                     "llm.c header magic 20240520; data.format: auto)"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  testing::internal::CaptureStderr();  // the format named: nothing to say
  data::DataLoader named({.sources = {{(d / "*.bin").string()}}, .format = data::ShardFormat::U16, .seq_len = 10,
                          .batch_size = 2});
  err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("raw uint16"), std::string::npos) << err;
}

TEST(DataLoader, TokenIdsAtOrAboveTheVocabularyFailWhenTheShardOpens) {
  auto d = temp_dir("vocab_open");
  for (bool wide : {false, true}) {
    // A bad id deep in the second shard, in a window the first batches would not draw, at a block's end (uint32)
    // and a block's start (uint16).
    const int64_t at = 40000 + (wide ? 4095 : 4096);
    std::vector<uint32_t> t(50000, 7);
    t[static_cast<size_t>(at)] = 3000;
    const std::string suffix = wide ? "32.bin" : "16.bin", p = (d / ("b" + suffix)).string();
    if (wide) {
      std::vector<int32_t> header(256, 0);
      header[0] = data::kLlmcMagic, header[1] = 2, header[2] = static_cast<int32_t>(t.size());
      std::ofstream f(p, std::ios::binary);
      f.write(reinterpret_cast<const char*>(header.data()), 1024);
      f.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(4 * t.size()));
    } else {
      data::write_llmc_shard(p, std::vector<uint16_t>(t.begin(), t.end()));
    }
    data::write_llmc_shard((d / ("a" + suffix)).string(), iota_tokens(1000, 0));
    data::LoaderOptions o{.sources = {{(d / ("[ab]" + suffix)).string()}}, .seq_len = 9, .batch_size = 1,
                          .shuffle = false, .vocab_size = 1000};
    auto msg = user_error([&] { data::DataLoader{o}; });  // the constructor, before any batch
    EXPECT_NE(msg.find(p + ": token " + std::to_string(at) + " (counting from 0 after any header) is 3000, not "
                       "below model.vocab_size 1000"), std::string::npos) << msg;
    o.vocab_size = 3001;
    EXPECT_EQ(data::DataLoader(o).num_tokens(), 51000);
  }
}

TEST(DataLoader, TokenIdsAtOrAboveTheVocabularyNameFileAndPosition) {
  auto d = temp_dir("vocab");
  std::vector<uint16_t> t(200, 7);
  t[123] = 300;  // one bad id
  const std::string p = (d / "s.bin").string();
  data::write_llmc_shard(p, t);
  data::LoaderOptions o{.sources = {{p}}, .seq_len = 9, .batch_size = 22, .shuffle = false, .vocab_size = 256};
  auto msg = user_error([&] { data::DataLoader(o).next(); });
  EXPECT_NE(msg.find(p + ": token 123 (counting from 0 after any header) is 300, not below model.vocab_size 256"),
            std::string::npos) << msg;
  o.vocab_size = 301;  // the same data fits a larger vocabulary
  EXPECT_EQ(data::DataLoader(o).next().inputs.max().item<int64_t>(), 300);
}

TEST(DataLoader, RanksReadDisjointWindowsDeterministically) {
  auto d = temp_dir("disjoint");
  data::write_llmc_shard((d / "s0.bin").string(), iota_tokens(401, 0));
  data::write_llmc_shard((d / "s1.bin").string(), iota_tokens(401, 1000));
  const std::string glob = (d / "s*.bin").string();
  std::set<int64_t> starts;
  for (int rank = 0; rank < 2; ++rank) {
    data::DataLoader a({.sources = {{glob}}, .seq_len = 10, .batch_size = 2, .rank = rank, .world_size = 2});
    data::DataLoader b({.sources = {{glob}}, .seq_len = 10, .batch_size = 2, .rank = rank, .world_size = 2});
    EXPECT_EQ(a.num_windows(), 80);
    for (int i = 0; i < 20; ++i) {  // one epoch: 80 windows / (2 × 2)
      auto x = a.next(), y = b.next();
      ASSERT_TRUE(at::equal(x.inputs, y.inputs));
      // targets are inputs shifted by one
      EXPECT_TRUE(at::equal(x.targets.narrow(1, 0, 9), x.inputs.narrow(1, 1, 9)));
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(starts.insert(x.inputs[r][0].item<int64_t>()).second);
    }
  }
  EXPECT_EQ(starts.size(), 80u);  // every window exactly once across both ranks
}

TEST(DataLoader, RestoreGivesTheSameSequenceAcrossEpochs) {
  auto d = temp_dir("restore");
  data::write_llmc_shard((d / "s.bin").string(), iota_tokens(1001));
  data::LoaderOptions o{.sources = {{(d / "s.bin").string()}}, .seq_len = 10, .batch_size = 3, .world_size = 1, .seed = 5};
  data::DataLoader a(o);
  for (int i = 0; i < 40; ++i) a.next();  // crosses into epoch 1 (33 batches per epoch)
  auto saved = a.state();
  EXPECT_EQ(saved.epoch, 1);
  std::vector<at::Tensor> expect;
  for (int i = 0; i < 40; ++i) expect.push_back(a.next().inputs);
  data::DataLoader b(o);
  b.restore(saved);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(at::equal(b.next().inputs, expect[i])) << i;
  auto msg = user_error([&] { b.restore({0, 5000}); });
  EXPECT_NE(msg.find("does not fit 100 windows"), std::string::npos) << msg;
}

TEST(DataLoader, TooSmallForOneStepIsAClearError) {
  auto d = temp_dir("small");
  data::write_llmc_shard((d / "s.bin").string(), iota_tokens(50));
  auto msg = user_error([&] {
    data::DataLoader({.sources = {{(d / "s.bin").string()}}, .seq_len = 10, .batch_size = 4, .world_size = 2});
  });
  EXPECT_NE(msg.find("one step needs batch(4) × ranks(2) = 8 windows"), std::string::npos) << msg;
}

// Held-out data (fit_batch): fewer windows than a whole batch on every rank reads smaller micro-batches; fewer than
// one a rank is still refused, in one line.
TEST(DataLoader, HeldOutDataFitsTheBatchToItsWindows) {
  auto d = temp_dir("small_held_out");
  data::write_llmc_shard((d / "s.bin").string(), iota_tokens(50));  // 4 windows of 11 tokens
  data::DataLoader l({.sources = {{(d / "s.bin").string()}}, .what = "data.val", .seq_len = 10, .batch_size = 4,
                      .world_size = 2, .shuffle = false, .fit_batch = true});
  EXPECT_EQ(l.batch_size(), 2);
  EXPECT_EQ(l.next().inputs.size(0), 2);
  EXPECT_EQ(l.batches_per_epoch(), 1);
  auto msg = user_error([&] {
    data::DataLoader({.sources = {{(d / "s.bin").string()}}, .seq_len = 10, .batch_size = 4, .world_size = 5,
                      .fit_batch = true});
  });
  EXPECT_NE(msg.find("held-out data needs one a rank: 5 windows"), std::string::npos) << msg;
}

TEST(Prepare, BytesSplitAtALineBreak) {
  auto d = temp_dir("prepare");
  std::ofstream((d / "t.txt").string()) << "line one\nline two\nline three\nline four\n";
  auto r = data::prepare_bytes((d / "t.txt").string(), (d / "out/x").string(), 0.3);
  EXPECT_EQ(r.train_tokens + r.val_tokens, 39);
  data::TokenShard v(r.val_path, data::ShardFormat::Auto);
  std::vector<int64_t> first(1);
  v.read(0, 1, first.data());
  EXPECT_EQ(first[0], 'l');  // starts at a line
  EXPECT_NE(user_error([&] { data::prepare_bytes((d / "t.txt").string(), (d / "x").string(), 0.9); })
                .find("--val-fraction"),
            std::string::npos);
}

TEST(ByteTokens, RoundTripAndOutOfRange) {
  const std::string text = "And God said\n\xc3\xa9";  // UTF-8 bytes above 127 stay bytes
  auto t = data::encode_bytes(text);
  ASSERT_EQ(t.size(), text.size());
  EXPECT_EQ(t.back(), 0xa9);
  EXPECT_EQ(data::decode_bytes(t), text);
  EXPECT_EQ(data::decode_bytes({65, 300, -1}), "A??");
}
