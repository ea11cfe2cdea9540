// Sharded save and resharding load: every layout of tests/multiproc/ckpt/layouts.h saves (ranks as threads,
// each with a real CPU communicator, so the shard lists travel the way they do between processes) and loads
// into every layout; the loaded blocks equal the global tensors'. Plus the errors a user can meet.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/safetensors.h"
#include "multiproc/ckpt/layouts.h"
#include "unit/ckpt/rank_threads.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::ckpt_test;
using testing_support::temp_dir;
using testing_support::user_error;
namespace fs = std::filesystem;

namespace {


void save_layout(const fs::path& dir, const Layout& l, int64_t step) {
  auto errors = run_ranks(l.world, [&](int r, comm::CommPtr c) {
    ckpt::CheckpointManager m(dir.string(), 0, c);
    m.save(step, rank_view(l, r, /*zeros=*/false), {{{"k", 1}}, {{"layout", l.name}}, {{"step", step}}});
  });
  for (int r = 0; r < l.world; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << l.name << " rank " << r;
}

}  // namespace

TEST(Reshard, EveryLayoutLoadsIntoEveryOther) {
  for (const auto& saved : all_layouts()) {
    auto d = temp_dir("reshard_" + saved.name);
    save_layout(d, saved, 7);
    auto meta = ckpt::read_meta(ckpt::resolve_checkpoint_dir(d.string()));
    EXPECT_EQ(meta.version, 2);
    EXPECT_EQ(meta.world_size, saved.world);
    EXPECT_EQ(meta.mesh["layout"], saved.name);
    EXPECT_EQ(meta.config["k"], 1);
    for (const auto& wanted : all_layouts()) {
      for (int r = 0; r < wanted.world; ++r) {
        auto view = rank_view(wanted, r, /*zeros=*/true);
        auto loaded = ckpt::load_into(d.string(), view);
        EXPECT_EQ(loaded.meta.step, 7);
        EXPECT_EQ(check_rank_view(view), "") << saved.name << " -> " << wanted.name << " rank " << r;
      }
    }
  }
}

// Each rank reads the byte ranges of the saved blocks its own blocks intersect, nothing else: loading into
// the layout that saved, a rank reads exactly its blocks' bytes (sharded layouts: a fraction of the file set).
TEST(Reshard, ARankReadsOnlyItsOwnRanges) {
  for (const auto& l : all_layouts()) {
    auto d = temp_dir("ranges_" + l.name);
    save_layout(d, l, 3);
    uint64_t saved = 0;
    for (const auto& [name, rec] : ckpt::read_meta(ckpt::resolve_checkpoint_dir(d.string())).tensors)
      for (const auto& s : rec.shards) saved += s.end - s.begin;
    for (int r = 0; r < l.world; ++r) {
      auto view = rank_view(l, r, /*zeros=*/true);
      uint64_t own = 0;
      for (const auto& s : view) own += static_cast<uint64_t>(s.local.numel()) * s.local.element_size();
      EXPECT_EQ(ckpt::load_into(d.string(), view).bytes_read, own) << l.name << " rank " << r;
      EXPECT_EQ(check_rank_view(view), "") << l.name << " rank " << r;
      EXPECT_LE(own, saved);
    }
  }
}

TEST(Reshard, RankFilesHoldOnlyTheirBlocks) {
  auto d = temp_dir("files");
  save_layout(d, layout_named("fsdp4"), 1);
  const auto dir = ckpt::resolve_checkpoint_dir(d.string());
  auto meta = ckpt::read_meta(dir);
  // [10, 6] over 4: rows 3, 3, 3, 1 — one shard per rank, each in its own file.
  const auto& a = meta.tensors.at("model.a");
  ASSERT_EQ(a.shards.size(), 4u);
  EXPECT_EQ(a.shards[3].file, "rank_00003.safetensors");
  EXPECT_EQ(a.shards[3].offsets, (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(a.shards[3].shape, (std::vector<int64_t>{1, 6}));
  // Each rank's file is a plain safetensors file holding its blocks.
  ckpt::SafetensorsReader r1((fs::path(dir) / "rank_00001.safetensors").string());
  EXPECT_TRUE(at::equal(r1.read("model.a"), global_tensors()[0].second.narrow(0, 3, 3)));
  // DDP: one copy, written by rank 0 only.
  auto d2 = temp_dir("files_ddp");
  save_layout(d2, layout_named("ddp2"), 1);
  EXPECT_FALSE(fs::exists(fs::path(ckpt::resolve_checkpoint_dir(d2.string())) / "rank_00001.safetensors"));
}

TEST(Reshard, FloatDtypesConvertOnLoad) {
  auto d = temp_dir("conv");
  save_layout(d, layout_named("fsdp2"), 1);
  std::vector<ShardedTensor> want = {{"model.a", {10, 6}, {0, 0}, at::zeros({10, 6}, at::kBFloat16), true},
                                     {"model.h", {4, 4}, {0, 0}, at::zeros({4, 4}, at::kFloat), true}};
  ckpt::load_into(d.string(), want);
  EXPECT_TRUE(at::equal(want[0].local, global_tensors()[0].second.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(want[1].local, global_tensors()[5].second.to(at::kFloat)));
  std::vector<ShardedTensor> ints = {{"data.ids", {5, 3}, {0, 0}, at::zeros({5, 3}, at::kFloat), true}};
  EXPECT_NE(user_error([&] { ckpt::load_into(d.string(), ints); }).find("'data.ids' is I64 in the checkpoint"),
            std::string::npos);
}

TEST(Reshard, MissingTensorAndShapeMismatchAreClearErrors) {
  auto d = temp_dir("errs");
  save_layout(d, layout_named("tp2"), 1);
  std::vector<ShardedTensor> missing = {{"model.zzz", {2}, {0}, at::zeros({2}), true}};
  EXPECT_NE(user_error([&] { ckpt::load_into(d.string(), missing); }).find("tensor 'model.zzz' is missing"),
            std::string::npos);
  std::vector<ShardedTensor> shape = {{"model.a", {10, 8}, {0, 0}, at::zeros({10, 8}), true}};
  EXPECT_NE(user_error([&] { ckpt::load_into(d.string(), shape); })
                .find("'model.a' has global shape [10, 6] in the checkpoint, the current run needs [10, 8]"),
            std::string::npos);
}

TEST(Reshard, FlippedBitAndTruncationNameFileAndTensor) {
  auto d = temp_dir("flip2");
  save_layout(d, layout_named("fsdp4"), 1);
  const fs::path dir = ckpt::resolve_checkpoint_dir(d.string());
  const fs::path f2 = dir / "rank_00002.safetensors";
  const auto range = ckpt::SafetensorsReader(f2.string()).entries().at("model.a");
  {
    std::fstream f(f2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(range.begin + 5));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(range.begin + 5));
    f.put(static_cast<char>(c ^ 0x01));
  }
  // A rank whose block does not touch rank 2's rows never reads that shard and loads fine...
  auto first_rows = rank_view(layout_named("fsdp4"), 0, true);
  EXPECT_NO_THROW(ckpt::load_into(dir.string(), first_rows));
  // ...one that does gets the file and the tensor named.
  auto all = rank_view(layout_named("single"), 0, true);
  const std::string msg = user_error([&] { ckpt::load_into(dir.string(), all); });
  EXPECT_NE(msg.find("rank_00002.safetensors: tensor 'model.a' fails its checksum"), std::string::npos) << msg;
  // Truncated: the last rank's file loses its tail.
  const fs::path f3 = dir / "rank_00003.safetensors";
  fs::resize_file(f3, fs::file_size(f3) - 3);
  auto last = rank_view(layout_named("fsdp4"), 3, true);
  const std::string t = user_error([&] { ckpt::load_into(dir.string(), last); });
  EXPECT_NE(t.find("rank_00003.safetensors: tensor '"), std::string::npos) << t;
  EXPECT_NE(t.find("is truncated"), std::string::npos) << t;
}

TEST(Reshard, OverlappingWritersFailBeforeCommit) {
  auto d = temp_dir("overlap");
  save_layout(d, layout_named("fsdp2"), 1);
  // Both ranks claim the whole tensor: a layout bug. The save fails and step 1 stays `latest`.
  Layout bad{"bad", 2, [](auto& g, int) { return full(g, true); }};
  auto errors = run_ranks(2, [&](int r, comm::CommPtr c) {
    ckpt::CheckpointManager m(d.string(), 0, c);
    m.save(2, rank_view(bad, r, false), {});
  });
  EXPECT_NE(errors[0].find("overlapping blocks"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 could not commit"), std::string::npos) << errors[1];
  EXPECT_EQ(fs::path(ckpt::resolve_checkpoint_dir(d.string())).filename(), "step_00000001");
}

// A rank whose file cannot be written (a full disk, here a directory in its file's place): every rank's error names
// that rank and the reason, so whichever rank the launcher blames first shows the cause.
TEST(Reshard, AFailedWriteIsNamedOnEveryRank) {
  auto d = temp_dir("failed_write");
  save_layout(d, layout_named("fsdp2"), 1);
  auto errors = run_ranks(2, [&](int r, comm::CommPtr c) {
    ckpt::CheckpointManager m(d.string(), 0, c);
    c->barrier();  // the managers removed stale temporary directories: block rank 1's file now
    if (r == 0) fs::create_directories(d / "step_00000002.tmp" / "rank_00001.safetensors");
    c->barrier();
    m.save(2, rank_view(layout_named("fsdp2"), r, false), {});
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[static_cast<size_t>(r)].find("checkpoint step 2: rank 1 could not write its file"),
              std::string::npos) << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  EXPECT_EQ(fs::path(ckpt::resolve_checkpoint_dir(d.string())).filename(), "step_00000001");
}

TEST(AsyncSave, TensorsMayChangeOnceSaveAsyncReturns) {
  auto d = temp_dir("async");
  ckpt::CheckpointManager m(d.string(), 2, nullptr);
  at::Tensor w = at::arange(1 << 20, at::kFloat);
  std::vector<ShardedTensor> s = {{"w", {1 << 20}, {0}, w, true}};
  for (int step = 1; step <= 3; ++step) {
    auto stats = m.save_async(step, s, {});
    EXPECT_EQ(stats.bytes, 4u << 20);
    w.add_(1.0);  // the training loop goes on while the writer works
  }
  EXPECT_GE(m.wait(), 0.0);
  auto ck = ckpt::CheckpointManager::load(d.string());
  EXPECT_EQ(ck.step, 3);
  EXPECT_TRUE(at::equal(ck.tensors.at("w"), at::arange(1 << 20, at::kFloat) + 2));
  EXPECT_FALSE(fs::exists(d / "step_00000001"));  // keep 2
}

TEST(AsyncSave, AWriteErrorSurfacesInWait) {
  auto d = temp_dir("async_err");
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  // A file where the step directory must go: the background write fails; wait() reports it.
  std::ofstream(d / "step_00000004.tmp") << "x";
  m.save_async(4, {{"w", {2}, {0}, at::zeros({2}), true}}, {});
  EXPECT_THROW(m.wait(), std::exception);
  EXPECT_FALSE(m.latest());
}

TEST(FormatV1, StillLoads) {
  // Written exactly as meshtrain's first checkpoint format: one replicated shard per tensor, CRC-32/IEEE,
  // config in state.
  auto d = temp_dir("v1");
  fs::create_directories(d / "step_00000003");
  auto t = at::arange(6, at::kFloat).reshape({2, 3});
  auto e = ckpt::write_safetensors((d / "step_00000003" / "rank_00000.safetensors").string(), {{"model.w", t}});
  const auto& w = e.at("model.w");
  nlohmann::json meta = {
      {"format_version", 1}, {"step", 3}, {"world_size", 2}, {"layout", "replicated"},
      {"state", {{"config", {{"model", {{"family", "gpt2"}}}}}}},
      {"tensors", {{"model.w", {{"shape", {2, 3}}, {"dtype", "F32"},
                                {"shards", {{{"file", "rank_00000.safetensors"}, {"offsets", {0, 0}}, {"shape", {2, 3}},
                                             {"byte_range", {w.begin, w.end}}, {"crc32", ckpt::crc32(t.data_ptr(), 24)}}}}}}}}};
  std::ofstream(d / "step_00000003" / "meta.json") << meta.dump();
  std::ofstream(d / "latest") << "step_00000003\n";
  std::vector<ShardedTensor> want = {{"model.w", {2, 3}, {1, 1}, at::zeros({1, 2}), true}};
  auto loaded = ckpt::load_into(d.string(), want);
  EXPECT_EQ(loaded.meta.version, 1);
  EXPECT_EQ(loaded.meta.config["model"]["family"], "gpt2");
  EXPECT_TRUE(at::equal(want[0].local, t.narrow(0, 1, 1).narrow(1, 1, 2)));
}

TEST(Crc, KnownValues) {
  const std::string s = "123456789";  // the standard check input
  EXPECT_EQ(ckpt::crc32(s.data(), s.size()), 0xCBF43926u);
  EXPECT_EQ(ckpt::crc32c(s.data(), s.size()), 0xE3069283u);
  // Incremental over odd splits equals one pass (the hardware path's 8-byte steps and byte tail).
  std::string big(1000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  for (size_t cut : {0u, 1u, 7u, 8u, 13u, 999u})
    EXPECT_EQ(ckpt::crc32c(big.data() + cut, big.size() - cut, ckpt::crc32c(big.data(), cut)),
              ckpt::crc32c(big.data(), big.size())) << cut;
}

TEST(FormatV1, FutureVersionIsRefused) {
  auto d = temp_dir("v9");
  std::ofstream(d / "meta.json") << R"({"format_version": 9, "step": 1, "tensors": {}})";
  std::vector<ShardedTensor> none;
  EXPECT_NE(user_error([&] { ckpt::load_into(d.string(), none); }).find("format_version 9 is not supported (valid: 1, 2)"),
            std::string::npos);
}
