#include "meshtrain/launch/signal_names.h"

#include <gtest/gtest.h>

#include <csignal>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/signal_forwarder.h"

using namespace meshtrain;
using namespace meshtrain::launch;

TEST(SignalNames, RoundTripAndSpellings) {
  for (int s : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGSEGV, SIGKILL})
    EXPECT_EQ(signal_from_name(signal_name(s)), s);
  EXPECT_EQ(signal_from_name("term"), SIGTERM);
  EXPECT_EQ(signal_from_name("15"), 15);
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "SIG" + std::to_string(SIGRTMIN + 1));
  EXPECT_THROW(signal_from_name("SIGNOPE"), UserError);
}

TEST(SignalNames, ListParsing) {
  EXPECT_EQ(parse_signal_list("SIGTERM, SIGINT,,SIGTERM"), (std::vector<int>{SIGTERM, SIGINT}));
  EXPECT_THROW(parse_signal_list("SIGKILL"), UserError);
  EXPECT_TRUE(is_stop_signal(SIGTERM));
  EXPECT_FALSE(is_stop_signal(SIGUSR1));
}
