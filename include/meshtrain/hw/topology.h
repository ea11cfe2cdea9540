// Topology: how the GPUs of this node are wired (docs/hw.md). A link matrix between local GPUs — NVLink
// count (direct or through NVSwitch) and the PCIe path class — plus each GPU's NUMA node and CPU affinity.
// Detected from NVML at run time (topology_detect.h: libnvidia-ml.so.1 is dlopen'ed, nothing links it),
// falling back to sysfs when NVML is absent; loadable from / savable to JSON (topology_json.h) so that
// placement is testable on machines without GPUs (fixtures in tests/fixtures/topology/).
//
// GPU indices are NVML's, which enumerate by PCI bus id; CUDA's agree when CUDA_DEVICE_ORDER=PCI_BUS_ID
// (meshrun sets it; CUDA's default "fastest first" order may differ on mixed-GPU machines).
#pragma once

#include <string>
#include <vector>

namespace meshtrain::hw {

// PCIe path between two GPUs, nearest first: nvidia-smi topo's legend and NVML's nvmlGpuTopologyLevel_t.
//   PIX  at most one PCIe bridge          PXB  several PCIe bridges, no host bridge
//   PHB  through a PCIe host bridge        NODE across host bridges within one NUMA node
//   SYS  across the inter-socket link (QPI/UPI, Infinity Fabric)
enum class PcieLevel { Self, PIX, PXB, PHB, NODE, SYS, Unknown };
const char* pcie_level_name(PcieLevel l);        // "X", "PIX", ..., "?"
bool parse_pcie_level(const std::string& s, PcieLevel* out);

struct GpuInfo {
  std::string name;        // "NVIDIA A100-SXM4-80GB"
  std::string pci_bus_id;  // "00000000:07:00.0" (NVML's form)
  int numa_node = -1;      // -1: unknown / no NUMA
  std::vector<int> cpus;   // CPUs close to the GPU (NVML's ideal affinity), ascending
  int nvswitch_links = 0;  // active NVLinks that end at an NVSwitch
};

struct Topology {
  std::string source;  // "nvml", "sysfs (…)", "fixture PATH", or why nothing was found
  std::string system;  // free text: "DGX A100 (8× A100-SXM4-80GB, 6 NVSwitch)"
  std::vector<GpuInfo> gpus;
  // nvlinks[i][j]: NVLinks usable between GPU i and j (direct, or through NVSwitch: the smaller of the two
  // GPUs' switch links), 0 = none. Symmetric; the diagonal is 0.
  std::vector<std::vector<int>> nvlinks;
  std::vector<std::vector<PcieLevel>> pcie;  // symmetric; the diagonal is Self

  int num_gpus() const { return static_cast<int>(gpus.size()); }
  bool nvlinked(int i, int j) const { return i != j && nvlinks[i][j] > 0; }

  // Maximal sets of GPUs where every pair is NVLinked (single GPUs count as cliques of one), largest first,
  // then by lowest GPU. NVSwitch boards: one clique of all GPUs; bridge pairs: {0,1}, {2,3}, …; PCIe only:
  // every GPU alone.
  std::vector<std::vector<int>> nvlink_cliques() const;
  int largest_clique() const;

  // Throws Error when the matrices are not num_gpus × num_gpus, not symmetric, or the diagonal is wrong.
  void check() const;
};

}  // namespace meshtrain::hw
