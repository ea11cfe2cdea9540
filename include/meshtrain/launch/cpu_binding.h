// --numa-binding: which CPUs each worker may run on, chosen near the GPU it drives, so its host-side work
// (kernel launches, data loading, pinned-memory copies) stays on the socket wired to that GPU.
//   none       inherit the launcher's CPUs (torchrun's default)
//   node       the CPUs of the GPU's NUMA node (meshrun's default where there are GPUs; docs/launcher.md)
//   socket     every CPU of the package (socket) that holds the GPU's NUMA node
//   exclusive  the GPU's node's physical cores split between the workers whose GPUs share that node, each a
//              disjoint, contiguous share (hyperthread siblings stay together)
// Always intersected with the CPUs the launcher may use (sched_getaffinity: Slurm/cgroup limits win).
// Local rank r drives the r-th visible GPU (CUDA_VISIBLE_DEVICES indices, else every GPU in PCI order).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/hw/sysfs_topology.h"

namespace meshtrain::launch {

enum class NumaBinding { None, Node, Socket, Exclusive };

// "none" | "node" | "socket" | "exclusive"; UserError otherwise.
NumaBinding parse_numa_binding(const std::string& mode);

struct CpuBindingPlan {
  std::vector<std::vector<int>> cpus;  // per local rank; empty = not pinned
  std::vector<std::string> notes;      // per local rank; the line shown first in its log ("" = none)
  std::string problem;                 // why (part of) the binding could not be applied; "" when it all was
};

// `cuda_visible_devices`: the launcher's CUDA_VISIBLE_DEVICES (nullopt = unset). `allowed`: the CPUs the
// launcher may use.
CpuBindingPlan plan_cpu_binding(NumaBinding mode, const std::string& mode_name, int nproc,
                                const std::optional<std::string>& cuda_visible_devices,
                                const std::vector<int>& allowed, const hw::SysfsTopology& topo);

// This process's allowed CPUs (sched_getaffinity).
std::vector<int> allowed_cpus();

}  // namespace meshtrain::launch
