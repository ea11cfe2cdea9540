// --numa-binding against fixture sysfs trees (support/fake_sysfs.h): a 2-socket box with 2 NUMA nodes per
// socket (so node and socket differ), 8 GPUs, two per node, hyperthreads; an NVSwitch and a NIC.
#include "meshtrain/launch/cpu_binding.h"

#include <gtest/gtest.h>

#include <fstream>

#include "meshtrain/hw/cpu_list.h"
#include "support/fake_sysfs.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::launch;
namespace fs = std::filesystem;

namespace {

std::vector<int> all_cpus() { return hw::parse_cpu_list("0-31"); }

}  // namespace

TEST(CpuBinding, NodeSocketExclusive) {
  hw::SysfsTopology t(testing_support::two_socket_eight_gpu_box("modes").string());
  auto node = plan_cpu_binding(NumaBinding::Node, "node", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(node.problem, "");
  EXPECT_EQ(hw::format_cpu_list(node.cpus[0]), "0-3,16-19");
  EXPECT_EQ(hw::format_cpu_list(node.cpus[1]), "0-3,16-19");
  EXPECT_EQ(hw::format_cpu_list(node.cpus[5]), "8-11,24-27");
  EXPECT_EQ(node.notes[5], "meshrun: local rank 5 → GPU 5 (0000:ab:00.0, NUMA node 2), CPUs 8-11,24-27 "
                           "(--numa-binding node)");

  auto socket = plan_cpu_binding(NumaBinding::Socket, "socket", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(hw::format_cpu_list(socket.cpus[0]), "0-7,16-23");
  EXPECT_EQ(hw::format_cpu_list(socket.cpus[3]), "0-7,16-23");
  EXPECT_EQ(hw::format_cpu_list(socket.cpus[7]), "8-15,24-31");

  // Two workers per node split its 4 cores, hyperthread siblings together.
  auto excl = plan_cpu_binding(NumaBinding::Exclusive, "exclusive", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(excl.problem, "");
  EXPECT_EQ(hw::format_cpu_list(excl.cpus[0]), "0-1,16-17");
  EXPECT_EQ(hw::format_cpu_list(excl.cpus[1]), "2-3,18-19");
  EXPECT_EQ(hw::format_cpu_list(excl.cpus[6]), "12-13,28-29");
  EXPECT_EQ(hw::format_cpu_list(excl.cpus[7]), "14-15,30-31");

  auto none = plan_cpu_binding(NumaBinding::None, "none", 8, std::nullopt, all_cpus(), t);
  for (const auto& c : none.cpus) EXPECT_TRUE(c.empty());
  EXPECT_EQ(none.problem, "");
}

TEST(CpuBinding, VisibleDevicesAndAllowedSet) {
  hw::SysfsTopology t(testing_support::two_socket_eight_gpu_box("visible").string());
  // CUDA_VISIBLE_DEVICES=4,5: local rank 0 drives GPU 4 (node 2).
  auto v = plan_cpu_binding(NumaBinding::Node, "node", 2, std::string("4,5"), all_cpus(), t);
  EXPECT_EQ(hw::format_cpu_list(v.cpus[0]), "8-11,24-27");
  EXPECT_EQ(hw::format_cpu_list(v.cpus[1]), "8-11,24-27");
  // A launcher limited to socket 0's first CPUs (a Slurm cgroup): intersected; node 2 is out of reach.
  auto lim = plan_cpu_binding(NumaBinding::Node, "node", 8, std::nullopt, hw::parse_cpu_list("0-5"), t);
  EXPECT_EQ(hw::format_cpu_list(lim.cpus[0]), "0-3");
  EXPECT_EQ(hw::format_cpu_list(lim.cpus[2]), "4-5");
  EXPECT_TRUE(lim.cpus[4].empty());
  EXPECT_NE(lim.problem.find("GPU 0000:9a:00.0's CPUs 8-11,24-27 are all outside the CPUs meshrun may use (0-5)"),
            std::string::npos);
}

TEST(CpuBinding, SaysWhyItCannotBind) {
  hw::SysfsTopology t(testing_support::two_socket_eight_gpu_box("problems").string());
  auto uuid = plan_cpu_binding(NumaBinding::Node, "node", 2, std::string("GPU-8f1c2d3e,GPU-99aa"), all_cpus(), t);
  EXPECT_TRUE(uuid.cpus[0].empty());
  EXPECT_NE(uuid.problem.find("names GPUs by UUID"), std::string::npos);
  auto more = plan_cpu_binding(NumaBinding::Node, "node", 10, std::nullopt, all_cpus(), t);
  EXPECT_FALSE(more.cpus[7].empty());
  EXPECT_TRUE(more.cpus[8].empty());
  EXPECT_NE(more.problem.find("local ranks 8..9 have no GPU of their own"), std::string::npos);
  hw::SysfsTopology empty(testing_support::temp_dir("nogpu").string());
  auto cpu_only = plan_cpu_binding(NumaBinding::Socket, "socket", 2, std::nullopt, all_cpus(), empty);
  EXPECT_NE(cpu_only.problem.find("--numa-binding socket: no NVIDIA GPU"), std::string::npos);
  // 3 workers on one node of 2 cores cannot each have a core of their own.
  auto tight = plan_cpu_binding(NumaBinding::Exclusive, "exclusive", 3, std::string("0,0,0"), hw::parse_cpu_list("0-1,16-17"), t);
  EXPECT_EQ(hw::format_cpu_list(tight.cpus[2]), "0-1,16-17");
  EXPECT_NE(tight.problem.find("hold 2 core(s) for 3 workers"), std::string::npos);
  EXPECT_THROW(parse_numa_binding("gpu"), UserError);
}

TEST(CpuBinding, DeviceWithoutNumaNodeUsesLocalCpulist) {
  fs::path root = testing_support::two_socket_eight_gpu_box("nonuma");
  testing_support::write_file(root / "sys/bus/pci/devices/0000:18:00.0/numa_node", "-1");
  testing_support::write_file(root / "sys/bus/pci/devices/0000:18:00.0/local_cpulist", "0-1");
  hw::SysfsTopology t(root.string());
  auto b = plan_cpu_binding(NumaBinding::Node, "node", 1, std::nullopt, all_cpus(), t);
  EXPECT_EQ(hw::format_cpu_list(b.cpus[0]), "0-1");
  EXPECT_EQ(b.notes[0], "meshrun: local rank 0 → GPU 0 (0000:18:00.0), CPUs 0-1 (--numa-binding node)");
}
