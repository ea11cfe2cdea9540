// spawn_and_wait: a child's exit code comes back as it is, a signal as 128 + its number, a program that cannot
// start as SpawnError; a child that outlives a timeout of its own (coreutils' `timeout`) reports 124. Every
// child is /bin/sh, done in well under a second.
#include "meshtrain/core/spawn_and_wait.h"

#include <gtest/gtest.h>

#include <chrono>

using namespace meshtrain;
using namespace std::chrono_literals;

namespace {

int sh(const std::string& script) { return spawn_and_wait({"/bin/sh", "-c", script}); }

}  // namespace

TEST(SpawnAndWait, ReturnsTheExitCode) {
  EXPECT_EQ(sh("exit 0"), 0);
  EXPECT_EQ(sh("exit 3"), 3);
  EXPECT_EQ(sh("exit 255"), 255);
}

TEST(SpawnAndWait, ASignalIs128PlusItsNumber) {
  EXPECT_EQ(sh("kill -KILL $$"), 128 + 9);
  EXPECT_EQ(sh("kill -TERM $$"), 128 + 15);
}

TEST(SpawnAndWait, WaitsForTheChildToEnd) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(sh("sleep 0.3; exit 7"), 7);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
}

TEST(SpawnAndWait, AChildTimingOutReportsItsCode) {
  const auto t0 = std::chrono::steady_clock::now();
  // `timeout` ends its command after 0.2 s and exits 124; the command alone would sleep 30 s.
  EXPECT_EQ(sh("if command -v timeout >/dev/null; then timeout 0.2 sleep 30; else exit 124; fi"), 124);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(SpawnAndWait, AProgramThatCannotStartIsSpawnError) {
  try {
    spawn_and_wait({"/nonexistent/meshtrain-helper", "--flag"});
    FAIL() << "started a program that does not exist";
  } catch (const SpawnError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot start /nonexistent/meshtrain-helper: No such file or directory");
  }
  EXPECT_THROW(spawn_and_wait({}), Error);
}
