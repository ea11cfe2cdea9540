// What load_into (ckpt/checkpoint_reader.h) calls incompatible — a checkpoint that does not fit the run, which
// `resume: auto` stops at — against damage, which it falls back from.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

ShardedTensor whole(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype = at::kFloat) {
  return {name, shape, std::vector<int64_t>(shape.size(), 0), at::zeros(shape, at::TensorOptions().dtype(dtype)), true};
}

// The kind of error load_into throws for `wanted` from `dir`: "incompatible", "damaged" or "none".
std::string failure_kind(const fs::path& dir, std::vector<ShardedTensor> wanted) {
  try {
    ckpt::load_into(dir.string(), wanted);
  } catch (const ckpt::IncompatibleCheckpoint&) {
    return "incompatible";
  } catch (const UserError&) {
    return "damaged";
  }
  return "none";
}

}  // namespace

TEST(CheckpointReader, IncompatibleIsNotDamage) {
  const fs::path d = temp_dir("reader_incompatible");
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  const fs::path step = m.save(3, {{"model.w", at::ones({4, 8})}, {"model.n", at::zeros({2}, at::kLong)}}, {});
  EXPECT_EQ(failure_kind(d, {whole("model.w", {4, 8})}), "none");
  EXPECT_EQ(failure_kind(d, {whole("model.w", {4, 8}), whole("model.extra", {2})}), "incompatible");
  EXPECT_EQ(failure_kind(d, {whole("model.w", {8, 4})}), "incompatible");
  EXPECT_EQ(failure_kind(d, {whole("model.n", {2}, at::kFloat)}), "incompatible");
  // A flipped byte in the shard: damage, for which resume: auto tries the previous checkpoint.
  const fs::path file = step / "rank_00000.safetensors";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-3, std::ios::end);
  c = static_cast<char>(c ^ 0x10);
  f.write(&c, 1);
  f.close();
  EXPECT_EQ(failure_kind(d, {whole("model.w", {4, 8}), whole("model.n", {2}, at::kLong)}), "damaged");
}
