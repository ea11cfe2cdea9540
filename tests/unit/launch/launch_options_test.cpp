#include "meshtrain/launch/launch_options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/launch_plan.h"
#include "meshtrain/launch/torchrun_compat.h"
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
  EXPECT_NE(user_error({"--master-port", "http", "x.py"}).find("--master-port 'http' is not a TCP port"),
            std::string::npos);
  EXPECT_NE(user_error({"--nnodes", "2", "--node-rank", "2", "x.py"}).find("outside [0, nnodes=2)"),
            std::string::npos);
  EXPECT_NE(user_error({"--nnodes", "4:2", "x.py"}).find("MIN:MAX with 1 <= MIN <= MAX"), std::string::npos);
  EXPECT_NE(user_error({"--nnodes", "2:3", "--node-rank", "3", "x.py"}).find("outside [0, nnodes=3)"),
            std::string::npos);  // an elastic job's node ranks go up to MAX
  EXPECT_NE(user_error({"--numa-binding", "gpu", "x.py"}).find("none, node, socket or exclusive"),
            std::string::npos);
  EXPECT_NE(user_error({"--tee", "5", "x.py"}).find("0 (none), 1 (stdout)"), std::string::npos);
  EXPECT_NE(user_error({}).find("no program given"), std::string::npos);
  EXPECT_NE(user_error({"--max-restarts"}).find("needs a value"), std::string::npos);
  EXPECT_NE(user_error({"--in-place-restart", "on", "x.py"}).find("--in-place-restart must be auto or off, got 'on'"),
            std::string::npos);
}

// In-place restarts need workers that regroup by themselves: a meshtrain config that resumes with
// checkpoint.resume auto; --in-place-restart off, another resume or another program restarts the group.
TEST(LaunchPlan, InPlaceRestartOnlyForAConfigThatResumesByItself) {
  auto dir = testing_support::temp_dir("in_place_restart");
  auto data = dir / "train.bin";
  std::ofstream(data) << std::string(2 * (4 * 256 + 1), 'x');
  auto fake_meshtrain = dir / "meshtrain";
  std::ofstream(fake_meshtrain) << "#!/bin/sh\n";
  std::filesystem::permissions(fake_meshtrain, std::filesystem::perms::owner_all);
  auto cfg = dir / "run.yaml";
  std::ofstream(cfg) << "data:\n  train: " << data.string() << "\ntrain:\n  steps: 1\n  micro_batch_size: 1\n"
                     << "  device: cpu\n";
  // meshrun's flags, the config, then its overrides.
  auto in_place = [&](std::vector<std::string> flags, const std::string& resume) {
    std::vector<std::string> argv{"--nproc-per-node", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {cfg.string(), "--set", "parallel.backend=cpu", "--set", "checkpoint.resume=" + resume});
    auto plan = make_launch_plan(parse(argv), dir.string(), 0, 2);
    validate_config_program(plan);
    return plan.in_place_restart;
  };
  EXPECT_TRUE(in_place({}, "auto"));
  EXPECT_FALSE(in_place({"--in-place-restart", "off"}, "auto"));
  EXPECT_FALSE(in_place({}, "none"));  // a restart must start over, which only a new group does
  auto program = make_launch_plan(parse({"--nproc-per-node", "2", "--no-python", "true"}), dir.string(), 0, 2);
  validate_config_program(program);
  EXPECT_FALSE(program.in_place_restart);
}

TEST(LaunchOptions, RdzvEndpointOverridesMaster) {
  auto o = parse({"--rdzv-endpoint", "node7:29400", "x.py"});
  EXPECT_EQ(o.master_addr, "node7");
  EXPECT_EQ(o.master_port, 29400);
  auto v6 = parse({"--rdzv-endpoint", "[fe80::1]:5", "x.py"});
  EXPECT_EQ(v6.master_addr, "fe80::1");
  EXPECT_EQ(v6.master_port, 5);
}

TEST(LaunchOptions, PortsAreCheckedWhereverTheyAreRead) {
  // 99999 used to wrap to 34463 in htons; ":::::" used to be taken as a host.
  EXPECT_NE(user_error({"--rdzv-endpoint", "127.0.0.1:99999", "x.py"}).find("'99999' is not a TCP port (0..65535"),
            std::string::npos);
  EXPECT_NE(user_error({"--rdzv-endpoint", ":::::", "x.py"}).find("--rdzv-endpoint ':::::' is not valid"),
            std::string::npos);
  EXPECT_NE(user_error({"--master-port", "70000", "x.py"}).find("--master-port '70000' is not a TCP port"),
            std::string::npos);
  EXPECT_NE(user_error({"--master-port", "-1", "x.py"}).find("is not a TCP port"), std::string::npos);
  EXPECT_NE(user_error({"x.py"}, {{"PET_MASTER_PORT", "65536"}}).find("PET_MASTER_PORT '65536' is not a TCP port"),
            std::string::npos);
  EXPECT_NE(user_error({"--rdzv-endpoint", "[::1:29500", "x.py"}).find("no closing ']'"), std::string::npos);
  EXPECT_NE(user_error({"--rdzv-endpoint", "[nothost]:1", "x.py"}).find("not an IPv6 address"), std::string::npos);
  EXPECT_NE(user_error({"--rdzv-endpoint", ":29500", "x.py"}).find("has no host"), std::string::npos);
  EXPECT_NE(user_error({"--master-addr", "a b", "x.py"}).find("--master-addr 'a b' is not a host name"),
            std::string::npos);
  EXPECT_EQ(parse({"--master-port", "0", "x.py"}).master_port, 0);  // any free port (single node)
  EXPECT_EQ(parse({"--master-port", "65535", "x.py"}).master_port, 65535);
  auto bare6 = parse({"--rdzv-endpoint", "::1", "x.py"});
  EXPECT_EQ(bare6.master_addr, "::1");
  EXPECT_EQ(bare6.master_port, 29500);
  EXPECT_EQ(parse({"--master-addr", "[::1]", "x.py"}).master_addr, "::1");
}

TEST(LaunchOptions, TorchrunFlagsAreAccepted) {
  auto o = parse({"--run-path", "--start-method", "fork", "--rdzv-conf", "join_timeout=42,read_timeout=5",
                  "--log-line-prefix-template", "[${role_name}${rank}]:", "--local-addr", "10.1.2.3",
                  "--logs-specs", "custom", "--virtual-local-rank", "--no-python", "x.py"});
  EXPECT_TRUE(o.run_path);
  EXPECT_TRUE(o.virtual_local_rank);
  EXPECT_EQ(o.start_method, "fork");
  EXPECT_DOUBLE_EQ(o.rdzv_timeout, 42);  // join_timeout → --rdzv-timeout
  EXPECT_EQ(o.local_addr, "10.1.2.3");
  EXPECT_EQ(o.log_line_prefix_template, "[${role_name}${rank}]:");
  auto notes = torchrun_compat_notes(o);
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_NE(notes[0].find("--rdzv-conf read_timeout ignored"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("--start-method fork ignored"), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find("--logs-specs custom ignored"), std::string::npos) << notes[2];
  EXPECT_NE(notes[3].find("--run-path wins over --no-python"), std::string::npos) << notes[3];
  EXPECT_TRUE(torchrun_compat_notes(parse({"x.py"})).empty());
  // --rdzv-timeout given itself wins over --rdzv-conf's timeout.
  EXPECT_DOUBLE_EQ(parse({"--rdzv-timeout", "7", "--rdzv-conf", "timeout=42", "x.py"}).rdzv_timeout, 7);
  EXPECT_NE(user_error({"--start-method", "thread", "x.py"}).find("spawn, fork or forkserver"), std::string::npos);
  EXPECT_NE(user_error({"--rdzv-conf", "oops", "x.py"}).find("each entry must be KEY=VALUE"), std::string::npos);
  EXPECT_EQ(parse({"x.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}|"}}).log_line_prefix_template,
            "${rank}|");
  // --run-path runs a script under python even with --no-python (torchrun's precedence).
  auto script = testing_support::temp_dir("run_path") / "s.py";
  std::ofstream(script) << "print(1)\n";
  auto plan = make_launch_plan(parse({"--run-path", "--no-python", script.string()}), "/bin", 0, 2);
  EXPECT_EQ(plan.kind, ProgramKind::Python);
  EXPECT_EQ(plan.command[1], "-u");
  EXPECT_EQ(plan.command[2], script.string());
}

TEST(LaunchPlan, LocalRanksFilterNamesExistingRanks) {
  auto plan = [](const std::string& filter) {
    make_launch_plan(parse({"--nproc-per-node", "2", "--local-ranks-filter", filter, "--no-python", "true"}),
                     "/bin", 0, 2);
  };
  EXPECT_NO_THROW(plan("0,1"));
  std::string msg = testing_support::user_error([&] { plan("5"); });
  EXPECT_NE(msg.find("--local-ranks-filter '5': local rank 5 does not exist; with 2 worker(s) per node the "
                     "local ranks are 0..1"), std::string::npos) << msg;
  EXPECT_NE(testing_support::user_error([&] { plan(","); }).find("names no local rank"), std::string::npos);
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
  std::ofstream(data) << std::string(2 * (4 * 256 + 1), 'x');  // uint16 tokens: one step of 4 ranks × 1 window
  auto fake_meshtrain = dir / "meshtrain";  // make_launch_plan only checks that it is executable
  std::ofstream(fake_meshtrain) << "#!/bin/sh\n";
  std::filesystem::permissions(fake_meshtrain, std::filesystem::perms::owner_all);
  const std::string bin = dir.string();
  auto cfg = dir / "gpu.yaml";
  std::ofstream(cfg) << "data:\n  train: " << data.string() << "\ntrain:\n  steps: 1\n  micro_batch_size: 1\n";
  auto plan = make_launch_plan(parse({"--nproc-per-node", "4", cfg.string()}), bin, 2, 2);
  std::string msg = testing_support::user_error([&] { validate_config_program(plan); });
  EXPECT_NE(msg.find("--nproc-per-node 4 starts more workers than the 2 GPU(s) visible"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parallel.backend: cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NCCL needs a GPU of its own per rank"), std::string::npos) << msg;
  // The same config on the CPU backend, or as many workers as GPUs: accepted.
  auto cpu = make_launch_plan(parse({"--nproc-per-node", "4", cfg.string(), "--set", "parallel.backend=cpu"}),
                              bin, 2, 2);
  EXPECT_NO_THROW(validate_config_program(cpu));
  EXPECT_EQ(gpu_sharing_note(cpu), "meshrun: 4 workers share the 2 GPU(s) of this node round-robin (local rank r "
                                   "on GPU r mod 2): fine for the CPU backend, which does not need a GPU of its "
                                   "own per rank");
  auto two = make_launch_plan(parse({"--nproc-per-node", "2", cfg.string()}), bin, 2, 2);
  EXPECT_NO_THROW(validate_config_program(two));
  EXPECT_EQ(gpu_sharing_note(two), "");
}
