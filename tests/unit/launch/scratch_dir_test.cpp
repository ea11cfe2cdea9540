#include "meshtrain/launch/scratch_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::launch;
namespace fs = std::filesystem;

namespace {

// A pid that belonged to a process which has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return pid;
}

}  // namespace

TEST(ScratchDir, RemovedAtExitUnlessKept) {
  const auto parent = testing_support::temp_dir("scratch_exit");
  std::string gone, kept_file, kept_all;
  {
    ScratchDir s(parent.string());
    gone = s.path();
    EXPECT_TRUE(fs::exists(gone + "/.owner"));
  }
  EXPECT_FALSE(fs::exists(gone));
  {
    ScratchDir s(parent.string());
    fs::create_directories(s.path() + "/attempt_0/1");
    fs::create_directories(s.path() + "/attempt_0/0");
    kept_file = s.path() + "/attempt_0/1/error.json";
    std::ofstream(kept_file) << "{}";
    std::ofstream(s.path() + "/attempt_0/0/error.json") << "{}";
    s.keep(kept_file);  // what the summary pointed at outlives meshrun; the rest goes
  }
  EXPECT_TRUE(fs::exists(kept_file));
  const std::string root = fs::path(kept_file).parent_path().parent_path().parent_path().string();
  EXPECT_FALSE(fs::exists(root + "/attempt_0/0"));
  EXPECT_FALSE(fs::exists(root + "/.owner"));  // kept directories are never swept
  {
    ScratchDir s(parent.string());
    kept_all = s.path();
    std::ofstream(kept_all + "/stdout.log") << "x";
    s.keep_all();
  }
  EXPECT_TRUE(fs::exists(kept_all + "/stdout.log"));
}

TEST(ScratchDir, SweepsDirectoriesOfLaunchersThatAreGone) {
  const auto parent = testing_support::temp_dir("scratch_sweep");
  auto make = [&](const std::string& name, const std::string& owner) {
    fs::create_directories(parent / name / "attempt_0");
    if (!owner.empty()) std::ofstream(parent / name / ".owner") << owner << "\n";
  };
  make("meshrun-dead01", std::to_string(dead_pid()) + " 12345");
  make("meshrun-reused", std::to_string(::getpid()) + " 1");  // our pid, but a different start time
  make("meshrun-kept01", "");                                  // no owner: kept by an earlier launcher
  make("other-dir", std::to_string(dead_pid()) + " 1");
  {
    ScratchDir live(parent.string());  // sweeps, then makes its own
    EXPECT_EQ(sweep_stale_scratch(parent.string()), 0);  // the live one is not stale
    EXPECT_TRUE(fs::exists(live.path()));
  }
  EXPECT_FALSE(fs::exists(parent / "meshrun-dead01"));
  EXPECT_FALSE(fs::exists(parent / "meshrun-reused"));
  EXPECT_TRUE(fs::exists(parent / "meshrun-kept01"));
  EXPECT_TRUE(fs::exists(parent / "other-dir"));
}

TEST(ScratchDir, ParentIsTmpdirWhenUsable) {
  const char* saved = std::getenv("TMPDIR");
  const std::string keep = saved ? saved : "";
  const auto dir = testing_support::temp_dir("scratch_parent");
  ::setenv("TMPDIR", dir.c_str(), 1);
  EXPECT_EQ(scratch_parent(), dir.string());
  ::setenv("TMPDIR", "/nonexistent/tmp", 1);  // would make every launch fail: /tmp instead
  EXPECT_EQ(scratch_parent(), "/tmp");
  if (saved) ::setenv("TMPDIR", keep.c_str(), 1);
  else ::unsetenv("TMPDIR");
}
