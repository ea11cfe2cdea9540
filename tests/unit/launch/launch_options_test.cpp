#include "meshtrain/launch/launch_options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/launch_plan.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::launch;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

LaunchOptions parse(std::vector<std::string> a, std::map<std::string, std::string> env = {}) {
  return parse_launch_options(a, env_of(env));
}

std::string user_error(std::vector<std::string> a, std::map<std::string, std::string> env = {}) {
  try {
    parse(a, env);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LaunchOptions, DefaultsMatchTorchrun) {
  auto o = parse({"train.py"});
  EXPECT_EQ(o.nproc_per_node, "1");
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.run_id, "none");
  EXPECT_DOUBLE_EQ(o.monitor_interval, 0.1);
  EXPECT_EQ(o.program, "train.py");
}

TEST(LaunchOptions, StopsAtTheProgramAndKeepsItsArgs) {
  auto o = parse({"--nproc-per-node", "4", "--no-python", "prog", "--nproc-per-node", "9", "-x"});
  EXPECT_EQ(o.nproc_per_node, "4");
  EXPECT_TRUE(o.no_python);
  EXPECT_EQ(o.program, "prog");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--nproc-per-node", "9", "-x"}));
}

TEST(LaunchOptions, UnderscoreEqualsAndShortSpellings) {
  auto o = parse({"--nproc_per_node=3", "--master_port", "1234", "--rdzv_id", "job", "-m", "pkg.mod"});
  EXPECT_EQ(o.nproc_per_node, "3");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.run_id, "job");
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.program, "pkg.mod");
}

TEST(LaunchOptions, PetEnvironmentFallsBackAndFlagsWin) {
  auto o = parse({"x.py"}, {{"PET_NPROC_PER_NODE", "8"}, {"PET_MAX_RESTARTS", "3"}, {"PET_STANDALONE", "1"},
                            {"PET_RDZV_ID", "abc"}});
  EXPECT_EQ(o.nproc_per_node, "8");
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(o.run_id, "abc");
  auto o2 = parse({"--nproc-per-node", "2", "x.py"}, {{"PET_NPROC_PER_NODE", "8"}});
  EXPECT_EQ(o2.nproc_per_node, "2");
}

TEST(LaunchOptions, BadInputIsOneClearLine) {
  EXPECT_NE(user_error({"--bogus", "x.py"}).find("unknown flag '--bogus'"), std::string::npos);
  EXPECT_NE(user_error({"--master-port", "http", "x.py"}).find("--master-port expects an integer"),
            std::string::npos);
  EXPECT_NE(user_error({"--nnodes", "2", "--node-rank", "2", "x.py"}).find("outside [0, nnodes=2)"),
            std::string::npos);
  EXPECT_NE(user_error({"--nnodes", "1:4", "x.py"}).find("elastic ranges"), std::string::npos);
  EXPECT_NE(user_error({"--numa-binding", "gpu", "x.py"}).find("none, node, socket or exclusive"),
            std::string::npos);
  EXPECT_NE(user_error({"--tee", "5", "x.py"}).find("0 (none), 1 (stdout)"), std::string::npos);
  EXPECT_NE(user_error({}).find("no program given"), std::string::npos);
  EXPECT_NE(user_error({"--max-restarts"}).find("needs a value"), std::string::npos);
}

TEST(LaunchOptions, RdzvEndpointOverridesMaster) {
  auto o = parse({"--rdzv-endpoint", "node7:29400", "x.py"});
  EXPECT_EQ(o.master_addr, "node7");
  EXPECT_EQ(o.master_port, 29400);
  auto v6 = parse({"--rdzv-endpoint", "[fe80::1]:5", "x.py"});
  EXPECT_EQ(v6.master_addr, "fe80::1");
  EXPECT_EQ(v6.master_port, 5);
}

TEST(LaunchOptions, NprocPerNodeFollowsTorchrun) {
  EXPECT_EQ(resolve_nproc_per_node("4", 8, 2), 4);
  EXPECT_EQ(resolve_nproc_per_node("cpu", 8, 2), 2);
  EXPECT_EQ(resolve_nproc_per_node("gpu", 8, 2), 8);
  EXPECT_EQ(resolve_nproc_per_node("auto", 8, 2), 8);
  EXPECT_EQ(resolve_nproc_per_node("auto", 0, 2), 2);
  EXPECT_THROW(resolve_nproc_per_node("gpu", 0, 2), UserError);
  EXPECT_THROW(resolve_nproc_per_node("0", 0, 2), UserError);
  EXPECT_THROW(resolve_nproc_per_node("xpu", 0, 2), UserError);
}

TEST(LaunchOptions, StreamMasksAndRankFilter) {
  EXPECT_EQ(std_streams_mask("3", 5, "tee"), 3);
  EXPECT_EQ(std_streams_mask("0:1,1:2", 1, "tee"), 2);
  EXPECT_EQ(std_streams_mask("0:1,1:2", 7, "tee"), 0);
  EXPECT_TRUE(rank_shown("", 3));
  EXPECT_TRUE(rank_shown("0,3", 3));
  EXPECT_FALSE(rank_shown("0,3", 1));
}

TEST(LaunchPlan, CommandForEachProgramKind) {
  auto cfg = make_launch_plan(parse({"--no-python", "true", "a"}), "/bin", 0, 2);
  EXPECT_EQ(cfg.command, (std::vector<std::string>{"true", "a"}));
  auto mod = make_launch_plan(parse({"-m", "pkg", "a"}), "/bin", 0, 2);
  EXPECT_EQ(mod.command[1], "-u");
  EXPECT_EQ(mod.command[2], "-m");
  auto sa = make_launch_plan(parse({"--standalone", "--no-python", "true"}), "/bin", 0, 2);
  EXPECT_EQ(sa.master_port, 0);
  EXPECT_NE(sa.run_id, "none");
  EXPECT_TRUE(sa.loopback_store);
  auto multi = make_launch_plan(parse({"--nnodes", "2", "--master-addr", "n0", "--no-python", "true"}), "/", 0, 2);
  EXPECT_FALSE(multi.loopback_store);
  EXPECT_TRUE(multi.host_store);
  try {
    make_launch_plan(parse({"missing.yaml"}), "/nonexistent", 0, 2);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("meshtrain"), std::string::npos);
  }
}

TEST(LaunchPlan, MoreWorkersThanGpusNeedsTheCpuBackend) {
  // A config that does not ask for the CPU backend: refused on a node with 2 GPUs.
  auto dir = testing_support::temp_dir("gpu_per_worker");
  auto data = dir / "train.bin";
  std::ofstream(data) << "x";
  auto fake_meshtrain = dir / "meshtrain";  // make_launch_plan only checks that it is executable
  std::ofstream(fake_meshtrain) << "#!/bin/sh\n";
  std::filesystem::permissions(fake_meshtrain, std::filesystem::perms::owner_all);
  const std::string bin = dir.string();
  auto cfg = dir / "gpu.yaml";
  std::ofstream(cfg) << "data:\n  train: " << data.string() << "\ntrain:\n  steps: 1\n";
  auto plan = make_launch_plan(parse({"--nproc-per-node", "4", cfg.string()}), bin, 2, 2);
  std::string msg = testing_support::user_error([&] { validate_config_program(plan); });
  EXPECT_NE(msg.find("--nproc-per-node 4 starts more workers than the 2 GPU(s) visible"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parallel.backend: cpu"), std::string::npos) << msg;
  // The same config on the CPU backend, or as many workers as GPUs: accepted.
  auto cpu = make_launch_plan(parse({"--nproc-per-node", "4", cfg.string(), "--set", "parallel.backend=cpu"}),
                              bin, 2, 2);
  EXPECT_NO_THROW(validate_config_program(cpu));
  auto two = make_launch_plan(parse({"--nproc-per-node", "2", cfg.string()}), bin, 2, 2);
  EXPECT_NO_THROW(validate_config_program(two));
}
