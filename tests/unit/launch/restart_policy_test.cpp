// Which failures --max-restarts restarts (restart_policy.h): not a root cause that exited 2 (invalid input).
#include "meshtrain/launch/restart_policy.h"

#include <gtest/gtest.h>

using namespace meshtrain::launch;

TEST(RestartPolicy, InvalidInputIsNotRestarted) {
  const std::string why = no_restart_line(2, "rank 1 (pid 42)", 3);
  EXPECT_EQ(why, "meshrun: no restart (3 left): the root cause exited with code 2, invalid input (a bad config, "
                 "flag or file) that a restart would only repeat: rank 1 (pid 42)");
}

TEST(RestartPolicy, OtherFailuresAndNoRestartsLeftSayNothing) {
  for (int code : {1, 3, 5, 127, 128 + 2, 128 + 9, 128 + 11})
    EXPECT_EQ(no_restart_line(code, "rank 0", 3), "") << code;
  EXPECT_EQ(no_restart_line(2, "rank 0", 0), "");  // no restart was coming anyway: no line about skipping one
}
