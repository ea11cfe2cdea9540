// Path patterns: a file name or a shell glob ("data/train_*.bin", "data/{a,b}.bin"), as config keys like
// data.train take them.
#pragma once

#include <string>
#include <vector>

namespace meshtrain {

// The matching files, sorted; a pattern that matches nothing is a UserError naming `what` (e.g. "data.train").
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& what);

}  // namespace meshtrain
