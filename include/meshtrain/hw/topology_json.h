// The topology's JSON form: fixtures (tests/fixtures/topology/), `meshtrain topo --json` and `--save`, so a
// user's machine can be replayed where there is no GPU. Matrix rows stay on one line (people read them).
#pragma once

#include <string>

#include "meshtrain/hw/topology.h"

namespace meshtrain::hw {

// Throws UserError naming `name` and the bad key.
Topology topology_from_json(const std::string& text, const std::string& name);
std::string topology_to_json(const Topology& t);
Topology load_topology(const std::string& path);  // UserError if unreadable or malformed
void save_topology(const Topology& t, const std::string& path);

}  // namespace meshtrain::hw
