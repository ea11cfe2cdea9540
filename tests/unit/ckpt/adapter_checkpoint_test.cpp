// AdapterCheckpoint (ckpt/adapter_checkpoint.h): an adapters-only checkpoint read over the base it names.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::testing_support;
namespace fs = std::filesystem;

namespace {

std::string save(const fs::path& dir, int64_t step, const std::map<std::string, at::Tensor>& tensors,
                 const nlohmann::json& state) {
  ckpt::CheckpointManager m(dir.string(), 0, nullptr);
  return m.save(step, tensors, state);
}

}  // namespace

TEST(AdapterCheckpoint, ReadsTheBaseItNamesAndRefusesAnother) {
  const fs::path d = temp_dir("adapter_ckpt");
  at::manual_seed(0);
  const at::Tensor w = at::randn({4, 3}), a = at::randn({2, 3});
  const std::string base = save(d / "base", 0, {{"model.l.weight", w}}, {});
  const std::string other = save(d / "other", 0, {{"model.l.weight", w + 1}}, {});
  const std::string id = ckpt::lora_base_id(ckpt::read_meta(base));
  EXPECT_EQ(id.rfind("crc32c:", 0), 0u);
  EXPECT_NE(id, ckpt::lora_base_id(ckpt::read_meta(other)));
  const std::string ad = save(d / "run", 5, {{"model.l.lora_A", a}, {"optim.l.lora_A.exp_avg", a * 2}},
                              {{"lora", {{"adapters_only", true}, {"base", base}, {"id", id}}}});
  EXPECT_TRUE(ckpt::holds_adapters_only(ckpt::read_meta(ad)));
  EXPECT_FALSE(ckpt::holds_adapters_only(ckpt::read_meta(base)));
  EXPECT_EQ(ckpt::lora_base_id(ckpt::read_meta(ad)), id);  // a run started from these adapters has their base

  // Whole tensors: the adapter from the checkpoint, the weight from the recorded base.
  const auto full = ckpt::load_full_with_base(ad, "model.", "", "--base DIR");
  ASSERT_EQ(full.size(), 2u);
  EXPECT_TRUE(at::equal(full.at("model.l.weight"), w));
  EXPECT_TRUE(at::equal(full.at("model.l.lora_A"), a));
  // Blocks (a row chunk, as FSDP asks): the weight's rows from the base that `base_dir` names.
  at::Tensor rows = at::zeros({2, 3}), got = at::zeros({2, 3});
  std::vector<ShardedTensor> wanted = {{"model.l.weight", {4, 3}, {2, 0}, rows, true},
                                       {"model.l.lora_A", {2, 3}, {0, 0}, got, true}};
  ckpt::load_with_base(ad, wanted, base, "checkpoint.init_from");
  EXPECT_TRUE(at::equal(rows, w.slice(0, 2, 4)));
  EXPECT_TRUE(at::equal(got, a));

  // Another base, or none where the path points: one line naming how to give the right one.
  std::string err = user_error([&] { ckpt::load_full_with_base(ad, "model.", other, "--base DIR"); });
  EXPECT_NE(err.find("belong to the base '" + base + "'"), std::string::npos) << err;
  EXPECT_NE(err.find(id), std::string::npos) << err;
  fs::rename(base, base + ".moved");
  err = user_error([&] { ckpt::load_full_with_base(ad, "model.", "", "--base DIR"); });
  EXPECT_NE(err.find("is neither a checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("--base DIR"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  err = user_error([&] { ckpt::load_with_base(ad, wanted, base, "checkpoint.init_from"); });
  EXPECT_NE(err.find("(checkpoint.init_from) is neither a checkpoint"), std::string::npos) << err;
  // Moved: given by its new path, it loads.
  const auto moved = ckpt::load_full_with_base(ad, "model.", base + ".moved", "--base DIR");
  EXPECT_TRUE(at::equal(moved.at("model.l.weight"), w));
}

TEST(AdapterCheckpoint, APlainCheckpointLoadsAsItIs) {
  const fs::path d = temp_dir("adapter_ckpt_plain");
  const at::Tensor w = at::arange(6, at::kFloat).reshape({2, 3});
  const std::string dir = save(d, 1, {{"model.w", w}}, {});
  at::Tensor got = at::zeros({2, 3});
  std::vector<ShardedTensor> wanted = {{"model.w", {2, 3}, {0, 0}, got, true}};
  ckpt::load_with_base(dir, wanted, "/nonexistent", "checkpoint.init_from");  // base_dir unused
  EXPECT_TRUE(at::equal(got, w));
}
