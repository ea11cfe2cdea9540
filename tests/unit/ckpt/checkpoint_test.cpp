#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"
#include "meshtrain/core/fs.h"

using namespace meshtrain;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

std::map<std::string, at::Tensor> sample_tensors() {
  at::manual_seed(0);
  return {{"model.w", at::randn({3, 5})},
          {"model.b", at::randn({5}).to(at::kBFloat16)},
          {"optim.step", at::full({}, 7.0)},
          {"ids", at::arange(10, at::kLong)},
          {"empty", at::empty({0, 4})}};
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  auto d = temp_dir("st");
  auto t = sample_tensors();
  auto entries = ckpt::write_safetensors((d / "a.safetensors").string(), t, {{"format", "pt"}});
  ckpt::SafetensorsReader r((d / "a.safetensors").string());
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.entries().size(), t.size());
  for (auto& [name, v] : t) {
    auto got = r.read(name);
    EXPECT_EQ(got.scalar_type(), v.scalar_type()) << name;
    EXPECT_TRUE(at::equal(got, v)) << name;
    EXPECT_EQ(r.entries().at(name).begin, entries.at(name).begin) << name;
  }
  // The header is 8-byte aligned, as Hugging Face's writer makes it.
  EXPECT_EQ((r.entries().at("empty").begin) % 8, 0u);
}

TEST(Safetensors, TruncatedFileIsAClearError) {
  auto d = temp_dir("trunc");
  auto p = (d / "a.safetensors").string();
  ckpt::write_safetensors(p, sample_tensors());
  fs::resize_file(p, fs::file_size(p) - 8);
  try {
    ckpt::SafetensorsReader r(p);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("beyond the file's"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, SaveLoadLatestAndKeep) {
  auto d = temp_dir("mgr");
  ckpt::CheckpointManager m(d.string(), 2, nullptr);
  EXPECT_FALSE(m.latest());
  auto t = sample_tensors();
  for (int64_t step : {10, 20, 30}) m.save(step, t, {{"data", {{"epoch", 0}, {"cursor", step}}}});
  ASSERT_TRUE(m.latest());
  EXPECT_EQ(fs::path(*m.latest()).filename(), "step_00000030");
  EXPECT_FALSE(fs::exists(d / "step_00000010"));  // keep 2
  EXPECT_TRUE(fs::exists(d / "step_00000020"));
  auto ck = ckpt::CheckpointManager::load(d.string());  // the parent resolves through `latest`
  EXPECT_EQ(ck.step, 30);
  EXPECT_EQ(ck.state["data"]["cursor"], 30);
  for (auto& [name, v] : t) EXPECT_TRUE(at::equal(ck.tensors.at(name), v)) << name;
}

TEST(Checkpoint, LeftoverTmpIsRemovedAndNeverLoaded) {
  auto d = temp_dir("tmp");
  fs::create_directories(d / "step_00000050.tmp");
  std::ofstream(d / "step_00000050.tmp" / "meta.json") << "{}";
  EXPECT_THROW(ckpt::CheckpointManager::load((d / "step_00000050.tmp").string()), UserError);
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  EXPECT_FALSE(fs::exists(d / "step_00000050.tmp"));
}

TEST(Checkpoint, FlippedBitNamesFileAndTensor) {
  auto d = temp_dir("flip");
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  auto dir = m.save(5, sample_tensors(), {});
  ckpt::SafetensorsReader r((fs::path(dir) / "rank_00000.safetensors").string());
  const auto off = r.entries().at("model.w").begin + 3;
  {
    std::fstream f(fs::path(dir) / "rank_00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(off));
    char c;
    f.get(c);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(off));
    f.put(c);
  }
  try {
    ckpt::CheckpointManager::load(dir);
    FAIL() << "expected a checksum error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank_00000.safetensors: tensor 'model.w' fails its checksum"), std::string::npos) << msg;
  }
}
