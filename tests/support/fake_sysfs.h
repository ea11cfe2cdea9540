// A fake /sys tree for the tests of the sysfs readers (tests/unit/hw) and the launcher's CPU binding
// (tests/unit/launch): read through SysfsTopology(root).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "support/test_support.h"

namespace meshtrain::testing_support {

namespace fs = std::filesystem;

inline void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

// 32 CPUs: CPU c is thread c/16 of core (c%16)%8 on package (c%16)/8; node n holds cores 4n%8.. of package
// n/2, i.e. node0 = 0-3,16-19  node1 = 4-7,20-23  node2 = 8-11,24-27  node3 = 12-15,28-31.
// GPU i (PCI bus order) sits on node i/2.
inline fs::path two_socket_eight_gpu_box(const std::string& name) {
  fs::path root = temp_dir(name);
  const fs::path cpu = root / "sys/devices/system/cpu";
  write_file(cpu / "online", "0-31");
  for (int c = 0; c < 32; ++c) {
    write_file(cpu / ("cpu" + std::to_string(c)) / "topology/physical_package_id", std::to_string((c % 16) / 8));
    write_file(cpu / ("cpu" + std::to_string(c)) / "topology/core_id", std::to_string((c % 16) % 8));
  }
  const char* node_cpus[] = {"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"};
  for (int n = 0; n < 4; ++n) write_file(root / "sys/devices/system/node" / ("node" + std::to_string(n)) / "cpulist", node_cpus[n]);
  const char* buses[] = {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"};
  const fs::path pci = root / "sys/bus/pci/devices";
  for (int g = 7; g >= 0; --g) {  // created out of order: the order must come from the addresses
    fs::path d = pci / (std::string("0000:") + buses[g] + ":00.0");
    write_file(d / "vendor", "0x10de");
    write_file(d / "class", "0x030200");
    write_file(d / "numa_node", std::to_string(g / 2));
    write_file(d / "local_cpulist", node_cpus[g / 2]);
  }
  write_file(pci / "0000:05:00.0/vendor", "0x10de");  // NVSwitch: a bridge, not a GPU
  write_file(pci / "0000:05:00.0/class", "0x068000");
  write_file(pci / "0000:07:00.0/vendor", "0x15b3");  // a NIC
  write_file(pci / "0000:07:00.0/class", "0x020700");
  return root;
}

}  // namespace meshtrain::testing_support
