// The topology as people read it: nvidia-smi topo -m style (`meshtrain topo`).
#pragma once

#include <string>

#include "meshtrain/hw/topology.h"

namespace meshtrain::hw {

// The matrix (X, NV#, PIX, …), then NUMA and CPU affinity columns, and a legend.
std::string format_topology_matrix(const Topology& t);

}  // namespace meshtrain::hw
