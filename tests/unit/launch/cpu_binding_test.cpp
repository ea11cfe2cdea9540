// --numa-binding against fixture sysfs trees: a 2-socket box with 2 NUMA nodes per socket (so node and socket
// differ), 8 GPUs, two per node, hyperthreads; an NVSwitch and a NIC that must not count as GPUs.
#include "meshtrain/launch/cpu_binding.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::launch;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

// 32 CPUs: CPU c is thread c/16 of core (c%16)%8 on package (c%16)/8; node n holds cores 4n%8.. of package
// n/2, i.e. node0 = 0-3,16-19  node1 = 4-7,20-23  node2 = 8-11,24-27  node3 = 12-15,28-31.
// GPU i (PCI bus order) sits on node i/2.
fs::path two_socket_eight_gpu_box(const std::string& name) {
  fs::path root = testing_support::temp_dir(name);
  const fs::path cpu = root / "sys/devices/system/cpu";
  write(cpu / "online", "0-31");
  for (int c = 0; c < 32; ++c) {
    write(cpu / ("cpu" + std::to_string(c)) / "topology/physical_package_id", std::to_string((c % 16) / 8));
    write(cpu / ("cpu" + std::to_string(c)) / "topology/core_id", std::to_string((c % 16) % 8));
  }
  const char* node_cpus[] = {"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"};
  for (int n = 0; n < 4; ++n) write(root / "sys/devices/system/node" / ("node" + std::to_string(n)) / "cpulist", node_cpus[n]);
  const char* buses[] = {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"};
  const fs::path pci = root / "sys/bus/pci/devices";
  for (int g = 7; g >= 0; --g) {  // created out of order: the order must come from the addresses
    fs::path d = pci / (std::string("0000:") + buses[g] + ":00.0");
    write(d / "vendor", "0x10de");
    write(d / "class", "0x030200");
    write(d / "numa_node", std::to_string(g / 2));
    write(d / "local_cpulist", node_cpus[g / 2]);
  }
  write(pci / "0000:05:00.0/vendor", "0x10de");  // NVSwitch: a bridge, not a GPU
  write(pci / "0000:05:00.0/class", "0x068000");
  write(pci / "0000:07:00.0/vendor", "0x15b3");  // a NIC
  write(pci / "0000:07:00.0/class", "0x020700");
  return root;
}

std::vector<int> all_cpus() { return parse_cpulist("0-31"); }

}  // namespace

TEST(CpuList, ParseAndFormat) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpulist(""), std::vector<int>{});
  EXPECT_EQ(format_cpulist({8, 0, 1, 2, 3, 3, 10, 11}), "0-3,8,10-11");
  EXPECT_THROW(parse_cpulist("3-1"), Error);
  EXPECT_THROW(parse_cpulist("a-b"), Error);
}

TEST(SysfsTopology, FindsGpusInBusOrder) {
  SysfsTopology t(two_socket_eight_gpu_box("topo").string());
  auto gpus = t.nvidia_gpus();
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus.front(), "0000:18:00.0");
  EXPECT_EQ(gpus.back(), "0000:db:00.0");
  EXPECT_EQ(t.numa_node_of_device("0000:5d:00.0"), 1);
  EXPECT_EQ(format_cpulist(t.node_cpus(2)), "8-11,24-27");
  EXPECT_EQ(t.package_of_cpu(27), 1);
}

TEST(CpuBinding, NodeSocketExclusive) {
  SysfsTopology t(two_socket_eight_gpu_box("modes").string());
  auto node = plan_cpu_binding(NumaBinding::Node, "node", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(node.problem, "");
  EXPECT_EQ(format_cpulist(node.cpus[0]), "0-3,16-19");
  EXPECT_EQ(format_cpulist(node.cpus[1]), "0-3,16-19");
  EXPECT_EQ(format_cpulist(node.cpus[5]), "8-11,24-27");
  EXPECT_EQ(node.notes[5], "meshrun: local rank 5 → GPU 5 (0000:ab:00.0, NUMA node 2), CPUs 8-11,24-27 "
                           "(--numa-binding node)");

  auto socket = plan_cpu_binding(NumaBinding::Socket, "socket", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(format_cpulist(socket.cpus[0]), "0-7,16-23");
  EXPECT_EQ(format_cpulist(socket.cpus[3]), "0-7,16-23");
  EXPECT_EQ(format_cpulist(socket.cpus[7]), "8-15,24-31");

  // Two workers per node split its 4 cores, hyperthread siblings together.
  auto excl = plan_cpu_binding(NumaBinding::Exclusive, "exclusive", 8, std::nullopt, all_cpus(), t);
  EXPECT_EQ(excl.problem, "");
  EXPECT_EQ(format_cpulist(excl.cpus[0]), "0-1,16-17");
  EXPECT_EQ(format_cpulist(excl.cpus[1]), "2-3,18-19");
  EXPECT_EQ(format_cpulist(excl.cpus[6]), "12-13,28-29");
  EXPECT_EQ(format_cpulist(excl.cpus[7]), "14-15,30-31");

  auto none = plan_cpu_binding(NumaBinding::None, "none", 8, std::nullopt, all_cpus(), t);
  for (const auto& c : none.cpus) EXPECT_TRUE(c.empty());
  EXPECT_EQ(none.problem, "");
}

TEST(CpuBinding, VisibleDevicesAndAllowedSet) {
  SysfsTopology t(two_socket_eight_gpu_box("visible").string());
  // CUDA_VISIBLE_DEVICES=4,5: local rank 0 drives GPU 4 (node 2).
  auto v = plan_cpu_binding(NumaBinding::Node, "node", 2, std::string("4,5"), all_cpus(), t);
  EXPECT_EQ(format_cpulist(v.cpus[0]), "8-11,24-27");
  EXPECT_EQ(format_cpulist(v.cpus[1]), "8-11,24-27");
  // A launcher limited to socket 0's first CPUs (a Slurm cgroup): intersected; node 2 is out of reach.
  auto lim = plan_cpu_binding(NumaBinding::Node, "node", 8, std::nullopt, parse_cpulist("0-5"), t);
  EXPECT_EQ(format_cpulist(lim.cpus[0]), "0-3");
  EXPECT_EQ(format_cpulist(lim.cpus[2]), "4-5");
  EXPECT_TRUE(lim.cpus[4].empty());
  EXPECT_NE(lim.problem.find("GPU 0000:9a:00.0's CPUs 8-11,24-27 are all outside the CPUs meshrun may use (0-5)"),
            std::string::npos);
}

TEST(CpuBinding, SaysWhyItCannotBind) {
  SysfsTopology t(two_socket_eight_gpu_box("problems").string());
  auto uuid = plan_cpu_binding(NumaBinding::Node, "node", 2, std::string("GPU-8f1c2d3e,GPU-99aa"), all_cpus(), t);
  EXPECT_TRUE(uuid.cpus[0].empty());
  EXPECT_NE(uuid.problem.find("names GPUs by UUID"), std::string::npos);
  auto more = plan_cpu_binding(NumaBinding::Node, "node", 10, std::nullopt, all_cpus(), t);
  EXPECT_FALSE(more.cpus[7].empty());
  EXPECT_TRUE(more.cpus[8].empty());
  EXPECT_NE(more.problem.find("local ranks 8..9 have no GPU of their own"), std::string::npos);
  SysfsTopology empty(testing_support::temp_dir("nogpu").string());
  auto cpu_only = plan_cpu_binding(NumaBinding::Socket, "socket", 2, std::nullopt, all_cpus(), empty);
  EXPECT_NE(cpu_only.problem.find("--numa-binding socket: no NVIDIA GPU"), std::string::npos);
  // 3 workers on one node of 2 cores cannot each have a core of their own.
  auto tight = plan_cpu_binding(NumaBinding::Exclusive, "exclusive", 3, std::string("0,0,0"), parse_cpulist("0-1,16-17"), t);
  EXPECT_EQ(format_cpulist(tight.cpus[2]), "0-1,16-17");
  EXPECT_NE(tight.problem.find("hold 2 core(s) for 3 workers"), std::string::npos);
  EXPECT_THROW(parse_numa_binding("gpu"), UserError);
}

TEST(CpuBinding, DeviceWithoutNumaNodeUsesLocalCpulist) {
  fs::path root = two_socket_eight_gpu_box("nonuma");
  write(root / "sys/bus/pci/devices/0000:18:00.0/numa_node", "-1");
  write(root / "sys/bus/pci/devices/0000:18:00.0/local_cpulist", "0-1");
  SysfsTopology t(root.string());
  auto b = plan_cpu_binding(NumaBinding::Node, "node", 1, std::nullopt, all_cpus(), t);
  EXPECT_EQ(format_cpulist(b.cpus[0]), "0-1");
  EXPECT_EQ(b.notes[0], "meshrun: local rank 0 → GPU 0 (0000:18:00.0), CPUs 0-1 (--numa-binding node)");
}
