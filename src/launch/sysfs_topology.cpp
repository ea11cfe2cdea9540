#include "meshtrain/launch/sysfs_topology.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {

std::vector<int> parse_cpulist(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }),
               item.end());
    if (item.empty()) continue;
    size_t dash = item.find('-');
    try {
      size_t used = 0;
      int lo = std::stoi(item.substr(0, dash), &used);
      MT_CHECK(used == (dash == std::string::npos ? item.size() : dash), "bad cpu list '", text, "'");
      int hi = lo;
      if (dash != std::string::npos) {
        hi = std::stoi(item.substr(dash + 1), &used);
        MT_CHECK(used == item.size() - dash - 1, "bad cpu list '", text, "'");
      }
      MT_CHECK(lo >= 0 && lo <= hi, "bad cpu list '", text, "'");
      for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    } catch (const std::logic_error&) {
      throw Error(cat("bad cpu list '", text, "'"));
    }
  }
  return cpus;
}

std::string format_cpulist(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

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
  return parse_cpulist(read("/sys/bus/pci/devices/" + pci + "/local_cpulist"));
}

std::vector<int> SysfsTopology::node_cpus(int node) const {
  return parse_cpulist(read("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
}

std::vector<int> SysfsTopology::online_cpus() const { return parse_cpulist(read("/sys/devices/system/cpu/online")); }

int SysfsTopology::package_of_cpu(int cpu) const {
  std::string v = read("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/physical_package_id");
  return v.empty() ? -1 : std::atoi(v.c_str());
}

int SysfsTopology::core_of_cpu(int cpu) const {
  std::string v = read("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_id");
  return v.empty() ? -1 : std::atoi(v.c_str());
}

}  // namespace meshtrain::launch
