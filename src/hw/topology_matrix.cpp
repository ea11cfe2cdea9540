#include "meshtrain/hw/topology_matrix.h"

#include <algorithm>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/cpu_list.h"

namespace meshtrain::hw {

std::string format_topology_matrix(const Topology& t) {
  const int n = t.num_gpus();
  std::ostringstream o;
  auto cell = [](const std::string& s) {
    std::string c = s;
    c.resize(std::max<std::size_t>(c.size(), 6), ' ');
    return c;
  };
  o << cell("");
  for (int j = 0; j < n; ++j) o << cell(cat("GPU", j));
  o << cell("NUMA") << "CPU affinity\n";
  for (int i = 0; i < n; ++i) {
    o << cell(cat("GPU", i));
    for (int j = 0; j < n; ++j) {
      const auto ui = static_cast<std::size_t>(i), uj = static_cast<std::size_t>(j);
      o << cell(i == j ? "X" : t.nvlinks[ui][uj] > 0 ? cat("NV", t.nvlinks[ui][uj]) : pcie_level_name(t.pcie[ui][uj]));
    }
    const GpuInfo& g = t.gpus[static_cast<std::size_t>(i)];
    o << cell(g.numa_node >= 0 ? std::to_string(g.numa_node) : "N/A") << (g.cpus.empty() ? "N/A" : format_cpu_list(g.cpus))
      << "\n";
  }
  o << "\nLegend: X = self; NV# = # NVLinks (direct or through NVSwitch); PIX = at most one PCIe bridge;\n"
       "PXB = several PCIe bridges; PHB = through a PCIe host bridge; NODE = across host bridges within a NUMA\n"
       "node; SYS = across the inter-socket link; ? = unknown.\n";
  return o.str();
}

}  // namespace meshtrain::hw
