// The sysfs readers and the one CPU-list parser, against a fake /sys tree (support/fake_sysfs.h).
#include "meshtrain/hw/sysfs_topology.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/cpu_list.h"
#include "meshtrain/hw/topology_detect.h"
#include "support/fake_sysfs.h"
#include "support/test_support.h"

using namespace meshtrain;

TEST(CpuList, OneParserForEveryCpuList) {
  EXPECT_EQ(hw::parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(hw::parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(hw::format_cpu_list({8, 0, 1, 2, 3, 3, 10, 11}), "0-3,8,10-11");
  EXPECT_THROW(hw::parse_cpu_list("3-1"), Error);
  EXPECT_THROW(hw::parse_cpu_list("a-b"), Error);
  // The two parsers it replaces: sysfs's trailing newline and blanks (launch), unsorted input (comm).
  EXPECT_EQ(hw::parse_cpu_list(" 8, 0-2 \n"), (std::vector<int>{0, 1, 2, 8}));
  EXPECT_EQ(hw::parse_cpu_list("4,4,3"), (std::vector<int>{3, 4}));
  EXPECT_EQ(hw::format_cpu_list({}), "");
  EXPECT_NE(testing_support::user_error([] { hw::parse_cpu_list("0-x"); }).find("'0-x' is not N or N-M"),
            std::string::npos);
  EXPECT_THROW(hw::parse_cpu_list("-1"), UserError);
  EXPECT_THROW(hw::parse_cpu_list("99999999999"), UserError);
}

TEST(SysfsTopology, FindsGpusInBusOrder) {
  hw::SysfsTopology t(testing_support::two_socket_eight_gpu_box("topo").string());
  auto gpus = t.nvidia_gpus();
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus.front(), "0000:18:00.0");
  EXPECT_EQ(gpus.back(), "0000:db:00.0");
  EXPECT_EQ(t.numa_node_of_device("0000:5d:00.0"), 1);
  EXPECT_EQ(hw::format_cpu_list(t.node_cpus(2)), "8-11,24-27");
  EXPECT_EQ(t.package_of_cpu(27), 1);
}

TEST(SysfsTopology, DetectionFallsBackToSysfs) {
  // Without NVML, detect_topology() reads the same tree: GPUs in bus order, NUMA node, local CPUs.
  hw::SysfsTopology t(testing_support::two_socket_eight_gpu_box("fallback").string());
  const hw::Topology topo = hw::topology_from_sysfs(t, "no NVML");
  ASSERT_EQ(topo.num_gpus(), 8);
  EXPECT_EQ(topo.gpus[3].pci_bus_id, "0000:5d:00.0");
  EXPECT_EQ(topo.gpus[3].numa_node, 1);
  EXPECT_EQ(hw::format_cpu_list(topo.gpus[3].cpus), "4-7,20-23");
  EXPECT_EQ(topo.source, "sysfs (no NVML; links unknown)");
  EXPECT_EQ(topo.largest_clique(), 1);
  const hw::Topology none = hw::topology_from_sysfs(hw::SysfsTopology("/nonexistent"), "no NVML");
  EXPECT_EQ(none.num_gpus(), 0);
  EXPECT_NE(none.source.find("no NVIDIA GPU found"), std::string::npos);
}
