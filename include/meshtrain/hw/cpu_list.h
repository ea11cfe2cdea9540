// Linux CPU lists ("0-15,64-79", as in sysfs cpulist files, taskset and numactl): the one parser and
// formatter that the launcher's CPU binding, the topology model and `meshtrain topo` share.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::hw {

// "0-3,8,10-11" → {0,1,2,3,8,10,11}, ascending and deduplicated; "" → {}. Blanks around items are ignored
// (sysfs ends its files with a newline). Throws UserError naming the text and the bad item.
std::vector<int> parse_cpu_list(const std::string& text);

// Sorted, deduplicated, ranges collapsed: {8,0,1,2,3,3} → "0-3,8"; {} → "".
std::string format_cpu_list(std::vector<int> cpus);

}  // namespace meshtrain::hw
