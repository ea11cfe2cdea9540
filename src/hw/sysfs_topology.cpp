#include "meshtrain/hw/sysfs_topology.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "meshtrain/hw/cpu_list.h"

namespace meshtrain::hw {

std::string SysfsTopology::read(const std::string& path) const {
  std::ifstream f(root_ + path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

std::vector<std::string> SysfsTopology::nvidia_gpus() const {
  std::vector<std::string> gpus;
  const std::string dir = "/sys/bus/pci/devices";
  DIR* d = ::opendir((root_ + dir).c_str());
  if (!d) return gpus;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name[0] == '.') continue;
    std::string vendor = read(dir + "/" + name + "/vendor");
    std::string cls = read(dir + "/" + name + "/class");
    if (vendor == "0x10de" && cls.rfind("0x03", 0) == 0) gpus.push_back(name);
  }
  ::closedir(d);
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

int SysfsTopology::numa_node_of_device(const std::string& pci) const {
  std::string v = read("/sys/bus/pci/devices/" + pci + "/numa_node");
  try {
    return v.empty() ? -1 : std::stoi(v);
  } catch (const std::logic_error&) {
    return -1;
  }
}

std::vector<int> SysfsTopology::local_cpus_of_device(const std::string& pci) const {
  return parse_cpu_list(read("/sys/bus/pci/devices/" + pci + "/local_cpulist"));
}

std::vector<int> SysfsTopology::node_cpus(int node) const {
  return parse_cpu_list(read("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
}

std::vector<int> SysfsTopology::online_cpus() const { return parse_cpu_list(read("/sys/devices/system/cpu/online")); }

int SysfsTopology::package_of_cpu(int cpu) const {
  std::string v = read("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/physical_package_id");
  return v.empty() ? -1 : std::atoi(v.c_str());
}

int SysfsTopology::core_of_cpu(int cpu) const {
  std::string v = read("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_id");
  return v.empty() ? -1 : std::atoi(v.c_str());
}

}  // namespace meshtrain::hw
