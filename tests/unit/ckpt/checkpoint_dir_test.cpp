// CheckpointDir (ckpt/checkpoint_dir.h): the one rule by which every reader follows `latest` — the name of a
// step directory beside it, never a path — so that no reader loads another run's checkpoint through an edited
// or damaged `latest`.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;
namespace fs = std::filesystem;

namespace {

void save_step(const fs::path& dir, int64_t step, double value) {
  ckpt::CheckpointManager m(dir.string(), 0, nullptr);
  m.save(step, {{"model.w", at::full({4, 8}, value)}}, {});
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::trunc) << text; }

}  // namespace

TEST(CheckpointDir, StepDirectoryNames) {
  EXPECT_EQ(ckpt::step_dir_name(100), "step_00000100");
  EXPECT_EQ(ckpt::step_of_dir_name("step_00000100"), 100);
  for (const char* bad : {"step_", "step_00000100.tmp", "latest", "../step_5", "/etc", "step_5/..", "step_-1"})
    EXPECT_EQ(ckpt::step_of_dir_name(bad), -1) << bad;
}

// `latest` naming another run's checkpoint (relative or absolute) or any path: refused in one line naming the
// `latest` file by resolution itself, so resume, init_from, generate, eval and export all refuse it.
TEST(CheckpointDir, LatestThatLeadsOutsideIsRefusedByEveryReader) {
  const fs::path root = temp_dir("cd_latest_outside");
  const fs::path ours = root / "run" / "checkpoints", other = root / "other_run" / "checkpoints";
  save_step(ours, 2, 1.0);
  save_step(other, 5, 5.0);
  const std::string latest = (ours / "latest").string();
  for (const std::string& target : {std::string("../../other_run/checkpoints/step_00000005"),
                                    (other / "step_00000005").string(), std::string("/etc"),
                                    std::string("step_00000002/../../../other_run/checkpoints/step_00000005")}) {
    write_text(ours / "latest", target + "\n");
    const std::string want = latest + ": names '" + target + "', which is not a complete step directory beside it";
    for (const auto& [reader, read] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"resolve", [&] { ckpt::resolve_checkpoint_dir(ours.string()); }},
             {"open_for_inference", [&] { ckpt::open_for_inference(ours.string()); }},
             {"load_full", [&] { ckpt::load_full(ours.string()); }},
             {"load_full_with_base", [&] { ckpt::load_full_with_base(ours.string(), "model.", "", ""); }}}) {
      const std::string msg = user_error(read);
      EXPECT_EQ(msg.rfind(want, 0), 0u) << reader << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_FALSE(ckpt::CheckpointManager(ours.string(), 0, nullptr).latest()) << target;
    // resume: auto reports it and takes the step directories beside it.
    const auto found = ckpt::find_resume_candidates(ours.string());
    ASSERT_EQ(found.usable.size(), 1u);
    EXPECT_EQ(fs::path(found.usable[0]).filename(), "step_00000002");
    EXPECT_NE(found.describe_skipped().find("latest: names '" + target + "', which is not a complete step"),
              std::string::npos) << found.describe_skipped();
  }
}

// A path given directly is the user's to give; only its .tmp-ness is checked — short ones included (`/etc` once
// ended in basic_string::compare's out_of_range).
TEST(CheckpointDir, GivenPathsAndIncompleteOnes) {
  EXPECT_EQ(ckpt::resolve_checkpoint_dir("/etc"), "/etc");
  EXPECT_EQ(ckpt::resolve_checkpoint_dir("/"), "/");
  EXPECT_EQ(ckpt::resolve_checkpoint_dir("a"), "a");
  EXPECT_NE(user_error([] { ckpt::resolve_checkpoint_dir("run/step_00000002.tmp/"); })
                .find("run/step_00000002.tmp: an incomplete checkpoint (.tmp) is never loaded"),
            std::string::npos);
  const std::string msg = user_error([] { ckpt::read_meta(ckpt::resolve_checkpoint_dir("/etc")); });
  EXPECT_EQ(msg, "/etc/meta.json: no such checkpoint metadata (not a checkpoint directory?)");
  const fs::path d = temp_dir("cd_empty_latest");
  write_text(d / "latest", "");
  EXPECT_EQ(user_error([&] { ckpt::resolve_checkpoint_dir(d.string()); }),
            (d / "latest").string() + ": empty (no complete checkpoint)");
}
