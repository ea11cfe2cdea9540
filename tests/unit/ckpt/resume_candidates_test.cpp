// What `checkpoint.resume: auto` may start from (ckpt/resume_candidates.h), and the metadata mistakes that
// must be one line naming meta.json, the tensor and what is valid (ckpt/checkpoint_meta.h).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"
#include "support/json_file.h"

using namespace meshtrain;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

// step_00000002, _04, _06 (keep all), `latest` → step_00000006.
fs::path three_checkpoints(const std::string& name) {
  auto d = temp_dir(name);
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  for (int64_t step : {2, 4, 6})
    m.save(step, {{"model.w", at::full({4, 8}, static_cast<double>(step))}}, {{"data", {{"cursor", step}}}});
  return d;
}

std::vector<std::string> names(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& d : dirs) out.push_back(fs::path(d).filename().string());
  return out;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::trunc) << text; }

// Edits step_00000006/meta.json and returns what verify_checkpoint says about it.
template <typename Edit>
std::string verify_edited(const std::string& name, Edit edit) {
  auto d = three_checkpoints(name);
  const fs::path meta = d / "step_00000006" / "meta.json";
  auto j = testing_support::read_json_file(meta);
  edit(j);
  write(meta, j.dump());
  return ckpt::verify_checkpoint((d / "step_00000006").string());
}

const std::vector<std::string> kAll = {"step_00000006", "step_00000004", "step_00000002"};
const std::vector<std::string> kOlder = {"step_00000004", "step_00000002"};

}  // namespace

TEST(ResumeCandidates, NothingThereMeansAFreshStart) {
  auto d = temp_dir("rc_empty");
  auto found = ckpt::find_resume_candidates(d.string());
  EXPECT_TRUE(found.usable.empty());
  EXPECT_FALSE(found.holds_checkpoints);
  EXPECT_FALSE(ckpt::find_resume_candidates((d / "absent").string()).holds_checkpoints);
  // An interrupted first save leaves only a .tmp directory: nothing was ever complete.
  fs::create_directories(d / "step_00000002.tmp");
  EXPECT_FALSE(ckpt::find_resume_candidates(d.string()).holds_checkpoints);
}

TEST(ResumeCandidates, NewestFirstAndNothingSkipped) {
  auto d = three_checkpoints("rc_good");
  auto found = ckpt::find_resume_candidates(d.string());
  EXPECT_EQ(names(found.usable), kAll);
  EXPECT_TRUE(found.skipped.empty()) << found.describe_skipped();
}

TEST(ResumeCandidates, LatestIsOnlyAHint) {
  // Dangling, empty, gone, or naming a .tmp directory: the step directories still decide, and `latest` is
  // reported.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"step_00000099\n", "names step_00000099, which does not exist"},
      {"", "empty"},
      {"step_00000008.tmp\n", "not a complete step directory"},
      {"-", "missing"}};
  for (const auto& [text, why] : cases) {
    auto d = three_checkpoints("rc_latest");
    if (text == "-") fs::remove(d / "latest");
    else write(d / "latest", text);
    auto found = ckpt::find_resume_candidates(d.string());
    EXPECT_EQ(names(found.usable), kAll) << text;
    ASSERT_EQ(found.skipped.size(), 1u) << text;
    EXPECT_EQ(fs::path(found.skipped[0].dir).filename(), "latest");
    EXPECT_NE(found.skipped[0].why.find(why), std::string::npos) << found.skipped[0].why;
  }
}

TEST(ResumeCandidates, DamagedNewestFallsBackToThePreviousOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"no meta.json", "meta.json: no such checkpoint metadata"},
      {"corrupt meta.json", "corrupt checkpoint metadata"},
      {"truncated file", "(truncated)"},
      {"missing file", "missing (meta.json names it)"}};
  for (const auto& [what, why] : cases) {
    auto d = three_checkpoints("rc_damaged");
    const fs::path step = d / "step_00000006";
    if (what == "no meta.json") fs::remove(step / "meta.json");
    if (what == "corrupt meta.json") write(step / "meta.json", "{\"format_version\": 2, \"step\": ");
    if (what == "truncated file") fs::resize_file(step / "rank_00000.safetensors", 100);
    if (what == "missing file") fs::remove(step / "rank_00000.safetensors");
    auto found = ckpt::find_resume_candidates(d.string());
    EXPECT_EQ(names(found.usable), kOlder) << what;
    ASSERT_FALSE(found.skipped.empty()) << what;
    EXPECT_EQ(fs::path(found.skipped[0].dir).filename(), "step_00000006") << what;
    EXPECT_NE(found.skipped[0].why.find(why), std::string::npos) << what << ": " << found.skipped[0].why;
    // `latest` names the skipped one: reported as well.
    EXPECT_NE(found.describe_skipped().find("latest: names step_00000006, which is not the newest usable"),
              std::string::npos) << found.describe_skipped();
  }
}

TEST(ResumeCandidates, NoneUsableIsNotAnEmptyDirectory) {
  auto d = three_checkpoints("rc_none");
  for (const char* s : {"step_00000002", "step_00000004", "step_00000006"}) fs::remove(d / s / "meta.json");
  auto found = ckpt::find_resume_candidates(d.string());
  EXPECT_TRUE(found.usable.empty());
  EXPECT_TRUE(found.holds_checkpoints);
  EXPECT_NE(found.describe_skipped().find("step_00000002: "), std::string::npos) << found.describe_skipped();
  // `latest` alone (every step directory deleted) still means checkpoints were here.
  for (const char* s : {"step_00000002", "step_00000004", "step_00000006"}) remove_tree((d / s).string());
  EXPECT_TRUE(ckpt::find_resume_candidates(d.string()).holds_checkpoints);
}

TEST(CheckpointMetaErrors, NegativeStep) {
  const auto why = verify_edited("meta_step", [](nlohmann::json& j) { j["step"] = -7; });
  EXPECT_NE(why.find("meta.json: step -7 is negative (valid:"), std::string::npos) << why;
}

TEST(CheckpointMetaErrors, NegativeByteRangeNamesTensorAndFile) {
  const auto why = verify_edited("meta_range", [](nlohmann::json& j) {
    j["tensors"]["model.w"]["shards"][0]["byte_range"] = {-128, 0};
  });
  EXPECT_NE(why.find("meta.json: tensor 'model.w': shard in rank_00000.safetensors has byte_range [-128, 0) "
                     "(valid: 0 ≤ begin ≤ end)"),
            std::string::npos)
      << why;
}

TEST(CheckpointMetaErrors, ByteRangeOfTheWrongLength) {
  const auto why = verify_edited("meta_len", [](nlohmann::json& j) {
    auto& r = j["tensors"]["model.w"]["shards"][0]["byte_range"];
    r[1] = r[1].get<int64_t>() - 4;
  });
  EXPECT_NE(why.find("tensor 'model.w': the shard in rank_00000.safetensors has byte_range"), std::string::npos) << why;
  EXPECT_NE(why.find("= 124 bytes, its shape [4, 8] and dtype F32 need 128"), std::string::npos) << why;
}

TEST(CheckpointMetaErrors, UnsupportedDtypeNamesTensorAndValidOnes) {
  const auto why = verify_edited("meta_dtype", [](nlohmann::json& j) { j["tensors"]["model.w"]["dtype"] = "I8"; });
  EXPECT_NE(why.find("meta.json: tensor 'model.w': unsupported dtype 'I8' (valid: "), std::string::npos) << why;
  EXPECT_NE(why.find("F32"), std::string::npos) << why;
}

TEST(CheckpointMetaErrors, ShardOutsideTheTensor) {
  const auto why = verify_edited("meta_offsets", [](nlohmann::json& j) {
    j["tensors"]["model.w"]["shards"][0]["offsets"] = {2, 0};
  });
  EXPECT_NE(why.find("tensor 'model.w': the shard in rank_00000.safetensors at offsets [2, 0] with shape [4, 8] "
                     "lies outside the global shape [4, 8]"),
            std::string::npos)
      << why;
}
