// detect_topology(): NVML through dlopen (hw/nvml_library.h: no binary links libnvidia-ml and the CPU build
// runs anywhere), else sysfs (SysfsTopology).

#include <algorithm>
#include <cctype>
#include <cstring>

#include "meshtrain/hw/topology_detect.h"
#include "hw/nvml_library.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::hw {

namespace {

constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;  // nvmlGpuP2PCapsIndex_t
constexpr int NVML_P2P_STATUS_OK = 0;          // nvmlGpuP2PStatus_t
constexpr int NVML_FEATURE_ENABLED = 1;        // nvmlEnableState_t
constexpr int NVML_NVLINK_DEVICE_TYPE_GPU = 0;
constexpr int NVML_NVLINK_DEVICE_TYPE_SWITCH = 2;

using Nvml = NvmlLibrary;


int sysfs_numa_node(const std::string& bus_id) {
  return std::max(-1, SysfsTopology().numa_node_of_device(normal_bus_id(bus_id)));
}

PcieLevel level_from_nvml(int v) {
  switch (v) {
    case 0:   // NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    case 10:  // NVML_TOPOLOGY_SINGLE
      return PcieLevel::PIX;
    case 20: return PcieLevel::PXB;   // NVML_TOPOLOGY_MULTIPLE
    case 30: return PcieLevel::PHB;   // NVML_TOPOLOGY_HOSTBRIDGE
    case 40: return PcieLevel::NODE;  // NVML_TOPOLOGY_NODE
    case 50: return PcieLevel::SYS;   // NVML_TOPOLOGY_SYSTEM
    default: return PcieLevel::Unknown;
  }
}

Topology empty_topology(int n, std::string source) {
  Topology t;
  t.source = std::move(source);
  t.gpus.resize(static_cast<std::size_t>(n));
  t.nvlinks.assign(static_cast<std::size_t>(n), std::vector<int>(static_cast<std::size_t>(n), 0));
  t.pcie.assign(static_cast<std::size_t>(n), std::vector<PcieLevel>(static_cast<std::size_t>(n), PcieLevel::Unknown));
  for (int i = 0; i < n; ++i) t.pcie[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = PcieLevel::Self;
  return t;
}

// The functions topology detection needs beyond NvmlLibrary's required ones; false (with `why`) without them.
bool has_topology_functions(const Nvml& nv, std::string* why) {
  if (nv.name && nv.pci && nv.p2p && nv.ancestor && nv.affinity && nv.link_state) return true;
  *why = "libnvidia-ml.so.1 lacks a needed function (driver older than R450?)";
  return false;
}

// Name, bus id, NUMA node and CPU affinity of GPU i.
void read_gpu(const Nvml& nv, nvmlDevice_t dev, GpuInfo& g) {
  char name[96] = {};
  if (nv.name(dev, name, sizeof name) == NVML_SUCCESS) g.name = name;
  NvmlPciInfo pci{};
  if (nv.pci(dev, &pci) == NVML_SUCCESS) g.pci_bus_id = pci.busId;
  g.numa_node = sysfs_numa_node(g.pci_bus_id);
  unsigned long mask[64] = {};  // 4096 CPUs
  if (nv.affinity(dev, 64, mask) == NVML_SUCCESS) {
    for (int c = 0; c < 64 * 64; ++c) {
      if ((mask[c / 64] >> (c % 64)) & 1ul) g.cpus.push_back(c);
    }
  }
}

// NVLink counts: walk each GPU's links; a link ends at another GPU (direct) or at an NVSwitch. Returns the
// direct counts; switch links go into the GPUs' nvswitch_links.
std::vector<std::vector<int>> walk_nvlinks(const Nvml& nv, const std::vector<nvmlDevice_t>& dev, Topology& t) {
  const std::size_t count = dev.size();
  std::vector<std::vector<int>> direct(count, std::vector<int>(count, 0));
  for (std::size_t i = 0; i < count; ++i) {
    for (unsigned l = 0; l < kMaxNvLinks; ++l) {
      int active = 0;
      if (nv.link_state(dev[i], l, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
      int type = -1;
      if (nv.link_remote_type && nv.link_remote_type(dev[i], l, &type) != NVML_SUCCESS) type = -1;
      NvmlPciInfo rp{};
      int peer = -1;
      if (type != NVML_NVLINK_DEVICE_TYPE_SWITCH && nv.link_remote_pci &&
          nv.link_remote_pci(dev[i], l, &rp) == NVML_SUCCESS) {
        for (std::size_t j = 0; j < count; ++j) {
          if (j != i && normal_bus_id(rp.busId) == normal_bus_id(t.gpus[j].pci_bus_id)) peer = static_cast<int>(j);
        }
      }
      if (peer >= 0) {
        ++direct[i][static_cast<std::size_t>(peer)];
      } else if (type != NVML_NVLINK_DEVICE_TYPE_GPU) {
        ++t.gpus[i].nvswitch_links;  // not one of our GPUs: an NVSwitch (or a GPU hidden from this container)
      }
    }
  }
  return direct;
}

// Per pair: the PCIe class and the usable NVLinks; then the matrices made symmetric.
void link_pairs(const Nvml& nv, const std::vector<nvmlDevice_t>& dev, const std::vector<std::vector<int>>& direct,
                Topology& t) {
  const std::size_t count = dev.size();
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = 0; j < count; ++j) {
      if (i == j) continue;
      int level = -1;
      if (nv.ancestor(dev[i], dev[j], &level) == NVML_SUCCESS) t.pcie[i][j] = level_from_nvml(level);
      int links = direct[i][j];
      if (t.gpus[i].nvswitch_links > 0 && t.gpus[j].nvswitch_links > 0)
        links += std::min(t.gpus[i].nvswitch_links, t.gpus[j].nvswitch_links);
      // NVLink P2P status is the authority (it is what CUDA/NCCL P2P will use); the link walk gives the count.
      int status = -1;
      if (nv.p2p(dev[i], dev[j], NVML_P2P_CAPS_INDEX_NVLINK, &status) == NVML_SUCCESS) {
        links = status == NVML_P2P_STATUS_OK ? std::max(links, 1) : 0;
      }
      t.nvlinks[i][j] = links;
    }
  }
  // Make the matrix symmetric even if the driver answered asymmetrically (take the smaller side).
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = i + 1; j < count; ++j) {
      t.nvlinks[i][j] = t.nvlinks[j][i] = std::min(t.nvlinks[i][j], t.nvlinks[j][i]);
      if (t.pcie[i][j] != t.pcie[j][i]) t.pcie[i][j] = t.pcie[j][i] = std::max(t.pcie[i][j], t.pcie[j][i]);
    }
  }
}

// Returns false (with `why`) when NVML is not usable here.
bool detect_nvml(Topology* out, std::string* why) {
  const Nvml& nv = Nvml::instance();
  if (!nv.ok()) {
    *why = nv.why();
    return false;
  }
  if (!has_topology_functions(nv, why)) return false;
  unsigned count = 0;
  if (nv.count(&count) != NVML_SUCCESS || count == 0) {
    *why = "NVML reports no GPUs";
    return false;
  }
  Topology t = empty_topology(static_cast<int>(count), "nvml");
  std::vector<nvmlDevice_t> dev(count);
  for (unsigned i = 0; i < count; ++i) {
    if (nv.handle(i, &dev[i]) != NVML_SUCCESS) {
      *why = cat("nvmlDeviceGetHandleByIndex_v2(", i, ") failed");
      return false;
    }
    read_gpu(nv, dev[i], t.gpus[i]);
  }
  link_pairs(nv, dev, walk_nvlinks(nv, dev, t), t);
  t.system = cat(count, "× ", t.gpus[0].name);
  *out = std::move(t);
  return true;
}

}  // namespace

Topology detect_topology() {
  Topology t;
  std::string why;
  if (detect_nvml(&t, &why)) return t;
  log::debug("topology: %s; falling back to sysfs", why.c_str());
  return topology_from_sysfs(SysfsTopology(), why);
}

// NVIDIA GPUs in sysfs: count, NUMA node and local CPUs, no link information.
Topology topology_from_sysfs(const SysfsTopology& sysfs, const std::string& nvml_why) {
  const std::vector<std::string> ids = sysfs.nvidia_gpus();  // NVML's order: by PCI bus id
  if (ids.empty()) return empty_topology(0, cat("no NVIDIA GPU found (", nvml_why, "; none in /sys/bus/pci)"));
  Topology t = empty_topology(static_cast<int>(ids.size()), cat("sysfs (", nvml_why, "; links unknown)"));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    GpuInfo& g = t.gpus[i];
    g.name = "NVIDIA GPU";
    g.pci_bus_id = ids[i];
    g.numa_node = std::max(-1, sysfs.numa_node_of_device(ids[i]));
    try {
      g.cpus = sysfs.local_cpus_of_device(ids[i]);
    } catch (const std::exception&) {
      g.cpus.clear();
    }
  }
  t.system = cat(ids.size(), "× NVIDIA GPU (sysfs)");
  return t;
}

}  // namespace meshtrain::hw
