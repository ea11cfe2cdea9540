// Environment parsing: WorldInfo (RANK/WORLD_SIZE/LOCAL_*) and the store endpoint (MASTER_*, TORCHELASTIC_*).
#include <gtest/gtest.h>

#include <map>

#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::comm;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const char* name) -> std::optional<std::string> {
    auto it = m.find(name);
    if (it == m.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(WorldInfo, NoEnvironmentIsOneProcess) {
  WorldInfo w = world_info_from_env(env_of({}));
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
}

TEST(WorldInfo, TorchrunVariables) {
  WorldInfo w = world_info_from_env(
      env_of({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}));
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
}

TEST(WorldInfo, LocalDefaultsToTheWholeJobOnOneNode) {
  WorldInfo w = world_info_from_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "3"}}));
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 3);
}

TEST(WorldInfo, Errors) {
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "0"}})); }).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"WORLD_SIZE", "2"}})); }).find("RANK"), std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "x1"}, {"WORLD_SIZE", "2"}})); })
                .find("RANK='x1' is not an integer"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2.5"}})); })
                .find("WORLD_SIZE='2.5'"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}})); })
                .find("RANK=2 must be < WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}})); })
                .find("RANK=-1 is out of range"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}})); })
                .find("WORLD_SIZE=0"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] {
              world_info_from_env(
                  env_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}));
            }).find("LOCAL_RANK=2 must be < LOCAL_WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([] { world_info_from_env(env_of({{"LOCAL_RANK", "0"}})); }).find("LOCAL_RANK"),
            std::string::npos);
}

TEST(StoreEndpoint, SingleProcessNeedsNoStore) {
  StoreEndpoint ep = store_endpoint_from_env(WorldInfo{}, env_of({}));
  EXPECT_TRUE(ep.master_addr.empty());
  EXPECT_FALSE(ep.use_agent_store);
  EXPECT_EQ(ep.restart_count, 0);
}

TEST(StoreEndpoint, LauncherVariables) {
  WorldInfo w{1, 2, 1, 2};
  StoreEndpoint ep = store_endpoint_from_env(w, env_of({{"MASTER_ADDR", "node0"},
                                                        {"MASTER_PORT", "29501"},
                                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                        {"TORCHELASTIC_RESTART_COUNT", "3"}}));
  EXPECT_EQ(ep.master_addr, "node0");
  EXPECT_EQ(ep.master_port, 29501);
  EXPECT_TRUE(ep.use_agent_store);
  EXPECT_EQ(ep.restart_count, 3);
  // torch compares with str(True): anything else means rank 0 hosts the store.
  ep = store_endpoint_from_env(w, env_of({{"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "1"}}));
  EXPECT_FALSE(ep.use_agent_store);
}

TEST(StoreEndpoint, Errors) {
  WorldInfo w{0, 2, 0, 2};
  EXPECT_NE(testing_support::user_error([&] { store_endpoint_from_env(w, env_of({{"MASTER_PORT", "29500"}})); })
                .find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([&] { store_endpoint_from_env(w, env_of({{"MASTER_ADDR", "h"}})); })
                .find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(testing_support::user_error([&] { store_endpoint_from_env(w, env_of({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})); })
                .find("MASTER_PORT=70000 is not a TCP port"),
            std::string::npos);
}

TEST(Store, SingleProcessGetsAnInProcessStore) {
  auto store = connect_store(WorldInfo{}, StoreEndpoint{}, std::chrono::milliseconds(1000));
  store->set("k", std::vector<uint8_t>{1, 2});
  EXPECT_EQ(store->get("k"), (std::vector<uint8_t>{1, 2}));
}

namespace meshtrain::comm {
namespace {

// A store call's c10::Error is shown without the C++ stack frames it carries; other exceptions as they are.
TEST(StoreErrorText, DropsTheStackFramesOfAStoreError) {
  try {
    TORCH_CHECK(false, "connection reset by peer");
  } catch (const c10::Error& e) {
    EXPECT_EQ(store_error_text(e), e.what_without_backtrace());
    EXPECT_NE(store_error_text(e).find("connection reset by peer"), std::string::npos);
  }
  EXPECT_EQ(store_error_text(std::runtime_error("plain")), "plain");
}

}  // namespace
}  // namespace meshtrain::comm
