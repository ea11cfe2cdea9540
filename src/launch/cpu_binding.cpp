#include "meshtrain/launch/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/cpu_list.h"

namespace meshtrain::launch {
namespace {

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& allowed) {
  std::set<int> ok(allowed.begin(), allowed.end());
  std::vector<int> out;
  for (int c : a)
    if (ok.count(c)) out.push_back(c);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// CUDA_VISIBLE_DEVICES → indices into the PCI-ordered GPU list; sets `problem` when it cannot be mapped.
std::vector<int> visible_gpus(const std::optional<std::string>& cvd, size_t n_gpus, std::string& problem) {
  std::vector<int> out;
  if (!cvd) {
    for (size_t i = 0; i < n_gpus; ++i) out.push_back(static_cast<int>(i));
    return out;
  }
  std::stringstream ss(*cvd);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item[0] == '-') break;  // CUDA's rule: an invalid entry ends the list
    if (!std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); })) {
      problem = "CUDA_VISIBLE_DEVICES=" + *cvd +
                " names GPUs by UUID/MIG id; meshrun maps GPUs to CPUs by index, so workers are not pinned "
                "(use indices, or --numa-binding none)";
      return {};
    }
    int idx = std::stoi(item);
    if (idx >= static_cast<int>(n_gpus)) {
      problem = "CUDA_VISIBLE_DEVICES=" + *cvd + " names GPU " + item + " but sysfs shows " +
                std::to_string(n_gpus) + " NVIDIA GPU(s); workers are not pinned";
      return {};
    }
    out.push_back(idx);
  }
  return out;
}

// Physical cores of `cpus` (siblings grouped), in order of each core's first CPU.
std::vector<std::vector<int>> cores_of(const std::vector<int>& cpus, const hw::SysfsTopology& topo) {
  std::map<std::pair<int, int>, size_t> index;
  std::vector<std::vector<int>> cores;
  for (int c : cpus) {
    std::pair<int, int> key{topo.package_of_cpu(c), topo.core_of_cpu(c)};
    if (key.second < 0) key = {-1, -1 - c};  // topology unknown: every CPU is its own core
    auto it = index.find(key);
    if (it == index.end()) {
      index[key] = cores.size();
      cores.push_back({c});
    } else {
      cores[it->second].push_back(c);
    }
  }
  return cores;
}

}  // namespace

NumaBinding parse_numa_binding(const std::string& m) {
  if (m == "none") return NumaBinding::None;
  if (m == "node") return NumaBinding::Node;
  if (m == "socket") return NumaBinding::Socket;
  if (m == "exclusive") return NumaBinding::Exclusive;
  throw UserError(cat("meshrun: --numa-binding must be none, node, socket or exclusive, got '", m, "'"));
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

CpuBindingPlan plan_cpu_binding(NumaBinding mode, const std::string& mode_name, int nproc,
                                const std::optional<std::string>& cvd, const std::vector<int>& allowed,
                                const hw::SysfsTopology& topo) {
  CpuBindingPlan p;
  p.cpus.assign(static_cast<size_t>(nproc), {});
  p.notes.assign(static_cast<size_t>(nproc), "");
  if (mode == NumaBinding::None) return p;
  const std::string flag = "--numa-binding " + mode_name;
  auto add_problem = [&](const std::string& s) {
    if (p.problem.empty()) p.problem = "meshrun: " + flag + ": " + s;
  };
  const std::vector<std::string> gpus = topo.nvidia_gpus();
  if (gpus.empty()) {
    add_problem("no NVIDIA GPU in /sys/bus/pci/devices, nothing to bind near; workers are not pinned");
    return p;
  }
  std::string why;
  const std::vector<int> visible = visible_gpus(cvd, gpus.size(), why);
  if (!why.empty()) {
    add_problem(why);
    return p;
  }

  // The CPUs near each local rank's GPU (its NUMA node, else the device's local_cpulist), and the node.
  std::vector<std::vector<int>> near(static_cast<size_t>(nproc));
  std::vector<int> node_of(static_cast<size_t>(nproc), -1);
  for (int r = 0; r < nproc; ++r) {
    if (r >= static_cast<int>(visible.size())) {
      add_problem(cat("local ranks ", visible.size(), "..", nproc - 1, " have no GPU of their own; not pinned"));
      break;
    }
    const std::string& pci = gpus[static_cast<size_t>(visible[static_cast<size_t>(r)])];
    int node = topo.numa_node_of_device(pci);
    std::vector<int> cpus = node >= 0 ? topo.node_cpus(node) : std::vector<int>{};
    if (cpus.empty()) cpus = topo.local_cpus_of_device(pci);
    if (cpus.empty()) {
      add_problem(cat("sysfs shows no NUMA node or local CPUs for GPU ", pci, "; local rank ", r, " not pinned"));
      continue;
    }
    if (mode == NumaBinding::Socket) {
      int pkg = topo.package_of_cpu(cpus.front());
      if (pkg >= 0) {
        std::vector<int> socket;
        for (int c : topo.online_cpus())
          if (topo.package_of_cpu(c) == pkg) socket.push_back(c);
        if (!socket.empty()) cpus = socket;
      }
    }
    node_of[static_cast<size_t>(r)] = node;
    near[static_cast<size_t>(r)] = intersect(cpus, allowed);
    if (near[static_cast<size_t>(r)].empty())
      add_problem(cat("GPU ", pci, "'s CPUs ", hw::format_cpu_list(cpus), " are all outside the CPUs meshrun may use (",
                      hw::format_cpu_list(allowed), "); local rank ", r, " not pinned"));
  }

  if (mode == NumaBinding::Exclusive) {
    // Ranks sharing the same near-CPU set split its physical cores: k ranks, C cores → rank i of the group
    // gets cores [i*C/k, (i+1)*C/k).
    std::map<std::vector<int>, std::vector<int>> groups;
    for (int r = 0; r < nproc; ++r)
      if (!near[static_cast<size_t>(r)].empty()) groups[near[static_cast<size_t>(r)]].push_back(r);
    for (auto& [cpus, ranks] : groups) {
      auto cores = cores_of(cpus, topo);
      const size_t k = ranks.size(), c = cores.size();
      if (c < k) {
        add_problem(cat("CPUs ", hw::format_cpu_list(cpus), " hold ", c, " core(s) for ", k,
                        " workers; those workers share them (as --numa-binding node)"));
        continue;
      }
      for (size_t i = 0; i < k; ++i) {
        std::vector<int> mine;
        for (size_t j = i * c / k; j < (i + 1) * c / k; ++j) mine.insert(mine.end(), cores[j].begin(), cores[j].end());
        std::sort(mine.begin(), mine.end());
        near[static_cast<size_t>(ranks[i])] = mine;
      }
    }
  }

  for (int r = 0; r < nproc; ++r) {
    const auto& cpus = near[static_cast<size_t>(r)];
    if (cpus.empty()) continue;
    p.cpus[static_cast<size_t>(r)] = cpus;
    const std::string& pci = gpus[static_cast<size_t>(visible[static_cast<size_t>(r)])];
    int node = node_of[static_cast<size_t>(r)];
    p.notes[static_cast<size_t>(r)] =
        cat("meshrun: local rank ", r, " → GPU ", visible[static_cast<size_t>(r)], " (", pci,
            node >= 0 ? cat(", NUMA node ", node) : std::string(), "), CPUs ", hw::format_cpu_list(cpus), " (", flag, ")");
  }
  return p;
}

}  // namespace meshtrain::launch
