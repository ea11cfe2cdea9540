// A fresh start over a previous run (core/run_dir.h): refused with both ways on, unless resumed or overwritten.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/run_dir.h"

using namespace meshtrain;
namespace fs = std::filesystem;

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("meshtrain_run_dir_" + std::to_string(::getpid()))).string();
    remove_tree(dir_);
    fs::create_directories(dir_);
    cfg_.train.out_dir = dir_;
    resolve(cfg_, 1);
  }
  void TearDown() override { remove_tree(dir_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel) << text;
  }
  std::string dir_;
  Config cfg_;
};

TEST_F(RunDir, AnEmptyDirectoryStartsFresh) {
  write("metrics.jsonl", "");  // created, never written: nothing to lose
  EXPECT_NO_THROW(check_fresh_start(cfg_));
  EXPECT_TRUE(previous_run_files(cfg_).empty());
}

TEST_F(RunDir, CheckpointsOrMetricsAreRefusedNamingBothWaysOn) {
  write("checkpoints/step_00000002/meta.json", "{}");
  write("checkpoints/latest", "step_00000002\n");
  write("metrics.jsonl", "{\"step\": 1}\n");
  EXPECT_EQ(previous_run_files(cfg_).size(), 3u);
  try {
    check_fresh_start(cfg_);
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string what = e.what();
    for (const char* part : {"step_00000002", "metrics.jsonl", "checkpoint.resume=auto", "--overwrite",
                             "another train.out_dir"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " in " << what;
  }
}

TEST_F(RunDir, AResumeOrOverwriteIsNoFreshStartOverThem) {
  write("checkpoints/step_00000002/meta.json", "{}");
  cfg_.checkpoint.resume = "auto";
  EXPECT_NO_THROW(check_fresh_start(cfg_));
  cfg_.checkpoint.resume = "none";
  cfg_.train.overwrite = true;
  EXPECT_NO_THROW(check_fresh_start(cfg_));
}
