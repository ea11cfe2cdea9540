// install_crash_handler: a real fatal signal in a child process (gtest death test) prints the line and the
// stack, and the process still dies of that signal.
#include "meshtrain/core/crash_handler.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace meshtrain {
namespace {

[[gnu::noinline]] void crash_with(int sig) {
  install_crash_handler("crash_test");
  raise(sig);
}

TEST(CrashHandler, SegfaultPrintsStackAndDiesOfIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(crash_with(SIGSEGV), testing::KilledBySignal(SIGSEGV),
              "crash_test: fatal signal SEGV \\(Segmentation fault\\); native stack:\n.*\\[0x");
}

TEST(CrashHandler, AbortToo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(crash_with(SIGABRT), testing::KilledBySignal(SIGABRT), "crash_test: fatal signal ABRT");
}

}  // namespace
}  // namespace meshtrain
