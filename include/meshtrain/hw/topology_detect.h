// detect_topology(): this machine's GPU topology, from NVML through dlopen (so no binary links
// libnvidia-ml and a CPU build runs anywhere), else from sysfs (GPUs, NUMA nodes and local CPUs; links
// unknown), read through SysfsTopology like the launcher's CPU binding.
#pragma once

#include <string>

#include "meshtrain/hw/sysfs_topology.h"
#include "meshtrain/hw/topology.h"

namespace meshtrain::hw {

// This machine: NVML if libnvidia-ml.so.1 loads and reports GPUs, else NVIDIA display devices from sysfs
// (NUMA node and local CPUs, links unknown), else no GPUs with `source` saying why. Never throws for a
// missing driver.
Topology detect_topology();

// The sysfs fallback on its own, for any root (tests build a fake tree): `why_not_nvml` goes into `source`.
Topology topology_from_sysfs(const SysfsTopology& sysfs, const std::string& why_not_nvml);

}  // namespace meshtrain::hw
