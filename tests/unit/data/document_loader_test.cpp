// The loader over shards with token-flag sidecars (loss masks, document starts): masked targets, packed
// positions and cumulative lengths, one document per window without packing, resumable positions, errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/token_flags.h"
#include "meshtrain/data/token_shard.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;

namespace {

// Documents of the given lengths, tokens 1, 2, 3, … in order; the loss flag on each document's second half.
struct Docs {
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> flags;
};

Docs make_docs(const std::vector<int>& lengths) {
  Docs d;
  for (int len : lengths) {
    for (int i = 0; i < len; ++i) {
      d.tokens.push_back(static_cast<uint16_t>(d.tokens.size() + 1));
      d.flags.push_back(static_cast<uint8_t>((i == 0 ? data::kDocStartFlag : 0) | (i >= len / 2 ? data::kLossFlag : 0)));
    }
  }
  return d;
}

void write_flags(const std::string& shard, const std::vector<uint8_t>& flags, int32_t count) {
  int32_t header[256] = {};
  header[0] = data::kFlagsMagic;
  header[1] = 1;
  header[2] = count;
  std::ofstream f(data::TokenFlags::sidecar_path(shard), std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(flags.data()), static_cast<std::streamsize>(flags.size()));
}

std::string write_docs(const std::string& path, const Docs& d) {
  data::write_llmc_shard(path, d.tokens);
  write_flags(path, d.flags, static_cast<int32_t>(d.flags.size()));
  return path;
}

std::vector<int64_t> row(const at::Tensor& t, int64_t b) {
  auto r = t[b].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

}  // namespace

TEST(DocumentLoader, PackedWindowsRestartPositionsAndMaskTargets) {
  auto dir = temp_dir("packed");
  // Documents of 3, 4 and 5 tokens: tokens 1-3 | 4-7 | 8-12. Windows of T + 1 = 7 tokens every 6.
  const auto d = make_docs({3, 4, 5});
  const auto shard = write_docs((dir / "s.bin").string(), d);
  data::DataLoader loader({.sources = {{(dir / "*").string()}}, .seq_len = 6, .batch_size = 1, .shuffle = false});
  EXPECT_TRUE(loader.masks_targets());  // the glob also matched the sidecar, which is not read as a shard
  ASSERT_EQ(loader.num_windows(), 1);  // 12 tokens: one window of 7 from 0 (the next needs tokens 6..12)
  data::DataLoader two({.sources = {{shard}}, .seq_len = 5, .batch_size = 2, .shuffle = false});
  auto b = two.next();  // windows [0, 6) and [5, 11): tokens 1-6 and 6-11
  EXPECT_EQ(row(b.inputs, 0), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // Targets 2..6: 2 and 3 in doc 0's trained half, 4 starts doc 1 (masked), 5 in doc 1's first half (masked),
  // 6 trained.
  EXPECT_EQ(row(b.targets, 0), (std::vector<int64_t>{2, 3, -100, -100, 6}));
  EXPECT_EQ(row(b.positions, 0), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  // Row 1 starts mid-document (token 6 of doc 1): a document starts there all the same.
  EXPECT_EQ(row(b.inputs, 1), (std::vector<int64_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(row(b.positions, 1), (std::vector<int64_t>{0, 1, 0, 1, 2}));
  EXPECT_EQ(row(b.targets, 1), (std::vector<int64_t>{7, -100, -100, 10, 11}));
  const auto cu = b.cu_seqlens;
  ASSERT_EQ(cu.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(cu, at::tensor({0, 3, 5, 7, 10}, at::kInt))) << cu;
  EXPECT_EQ(b.max_doc_len, 3);
  EXPECT_EQ(b.loss_tokens, 6);
}

TEST(DocumentLoader, UnpackedGivesEachDocumentItsOwnPaddedWindow) {
  auto dir = temp_dir("unpacked");
  const auto shard = write_docs((dir / "s.bin").string(), make_docs({3, 1, 9, 4}));
  data::DataLoader loader({.sources = {{shard}}, .seq_len = 5, .batch_size = 3, .shuffle = false, .packing = false});
  ASSERT_EQ(loader.num_windows(), 3);  // the one-token document has no target
  auto b = loader.next();
  EXPECT_FALSE(b.positions.defined());
  EXPECT_EQ(row(b.inputs, 0), (std::vector<int64_t>{1, 2, 3, 0, 0}));
  EXPECT_EQ(row(b.targets, 0), (std::vector<int64_t>{2, 3, -100, -100, -100}));  // past the document: padding
  EXPECT_EQ(row(b.inputs, 1), (std::vector<int64_t>{5, 6, 7, 8, 9}));  // 9 tokens cut at T + 1 = 6
  EXPECT_EQ(row(b.targets, 1), (std::vector<int64_t>{-100, -100, -100, 9, 10}));
  EXPECT_EQ(row(b.inputs, 2), (std::vector<int64_t>{14, 15, 16, 17, 0}));
  EXPECT_EQ(row(b.targets, 2), (std::vector<int64_t>{-100, 16, 17, -100, -100}));
  EXPECT_EQ(b.loss_tokens, 6);
}

TEST(DocumentLoader, LossMaskAllKeepsEveryTargetButDocumentStarts) {
  auto dir = temp_dir("all");
  const auto shard = write_docs((dir / "s.bin").string(), make_docs({3, 4}));
  data::DataLoader loader({.sources = {{shard}}, .seq_len = 6, .batch_size = 1, .shuffle = false, .loss_mask = false});
  auto b = loader.next();
  EXPECT_EQ(row(b.targets, 0), (std::vector<int64_t>{2, 3, -100, 5, 6, 7}));
  EXPECT_EQ(b.loss_tokens, 5);
}

TEST(DocumentLoader, ShardsWithoutSidecarsTrainOnEveryToken) {
  auto dir = temp_dir("plain");
  std::vector<uint16_t> t(20);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint16_t>(i);
  data::write_llmc_shard((dir / "s.bin").string(), t);
  data::DataLoader loader({.sources = {{(dir / "s.bin").string()}}, .seq_len = 4, .batch_size = 2, .shuffle = false});
  EXPECT_FALSE(loader.masks_targets());
  auto b = loader.next();
  EXPECT_FALSE(b.positions.defined());
  EXPECT_EQ(b.loss_tokens, 8);
  EXPECT_EQ(row(b.targets, 1), (std::vector<int64_t>{5, 6, 7, 8}));
}

TEST(DocumentLoader, ResumesToTheSameMaskedBatches) {
  auto dir = temp_dir("resume");
  std::vector<int> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(2 + i % 7);
  const auto shard = write_docs((dir / "s.bin").string(), make_docs(lengths));
  for (bool packing : {true, false}) {
    data::LoaderOptions o{.sources = {{shard}}, .seq_len = 8, .batch_size = 2, .rank = 1, .world_size = 2,
                          .packing = packing};
    data::DataLoader a(o);
    for (int i = 0; i < 5; ++i) a.next();
    const auto st = a.state();
    const auto want = a.next();
    data::DataLoader b(o);
    b.restore(st);
    const auto got = b.next();
    EXPECT_TRUE(at::equal(want.inputs, got.inputs) && at::equal(want.targets, got.targets)) << "packing " << packing;
    EXPECT_EQ(want.loss_tokens, got.loss_tokens);
    if (packing) {
      EXPECT_TRUE(at::equal(want.positions, got.positions) && at::equal(want.cu_seqlens, got.cu_seqlens));
    }
  }
}

TEST(DocumentLoader, SidecarErrorsNameTheFile) {
  auto dir = temp_dir("errors");
  const auto d = make_docs({3, 4, 5});
  const auto a = write_docs((dir / "a.bin").string(), d);
  data::write_llmc_shard((dir / "b.bin").string(), d.tokens);  // no sidecar
  auto msg = user_error([&] { data::DataLoader({.sources = {{(dir / "*.bin").string()}}, .seq_len = 4, .batch_size = 1}); });
  EXPECT_NE(msg.find("1 of 2 shards have token flags"), std::string::npos) << msg;
  EXPECT_NE(msg.find((dir / "b.bin.flags").string()), std::string::npos) << msg;

  write_flags(a, d.flags, 11);  // count differs from the shard's 12 tokens
  msg = user_error([&] { data::DataLoader({.sources = {{a}}, .seq_len = 4, .batch_size = 1}); });
  EXPECT_NE(msg.find(a + ".flags: flags for 11 tokens, but its shard"), std::string::npos) << msg;
}
