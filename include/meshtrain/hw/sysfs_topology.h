// The node's CPU/NUMA/PCI topology as Linux shows it in sysfs, read under a root directory so tests can build
// a fake tree (tests/unit/launch/cpu_binding_test.cpp builds a 2-socket, 4-NUMA-node, 8-GPU box). No CUDA,
// no NVML: this works on any Linux, and in a launcher that must not initialise CUDA before forking workers.
// The one sysfs reader of the launcher's CPU binding and of detect_topology()'s fallback.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::hw {

class SysfsTopology {
 public:
  // root: "" for the real /sys; a test's fake tree otherwise (it holds sys/bus/pci/devices/... etc.).
  explicit SysfsTopology(std::string root = "") : root_(std::move(root)) {}

  // PCI addresses ("0000:3b:00.0") of NVIDIA GPUs (vendor 0x10de, display/3D controller class 0x03xxxx;
  // NVSwitches and other bridges are not GPUs), in PCI bus order: the order of nvidia-smi's indices and of
  // CUDA's device indices on a node of identical GPUs.
  std::vector<std::string> nvidia_gpus() const;
  int numa_node_of_device(const std::string& pci) const;             // -1 when unknown
  std::vector<int> local_cpus_of_device(const std::string& pci) const;  // local_cpulist
  std::vector<int> node_cpus(int node) const;                        // node<N>/cpulist
  std::vector<int> online_cpus() const;                              // cpu/online
  int package_of_cpu(int cpu) const;                                 // physical_package_id, -1 unknown
  int core_of_cpu(int cpu) const;                                    // core_id, -1 unknown

 private:
  std::string read(const std::string& path) const;  // first line, "" when missing
  std::string root_;
};

}  // namespace meshtrain::hw
