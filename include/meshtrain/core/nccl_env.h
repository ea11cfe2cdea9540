// comm.nccl_env: the NCCL variables a config asks meshrun to set in every worker, checked by name before any
// worker starts. NCCL ignores a misspelled variable without a word, so a typo (NCCL_IB_HCAS) would silently
// run with the defaults; the known names below are the ones NCCL reads (its env documentation, 2.18–2.27)
// that a node's owner sets, and docs/nccl.md gives presets for an NVLink node and IB/RoCE clusters.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace meshtrain {

// The NCCL variable names comm.nccl_env accepts, sorted.
const std::vector<std::string>& known_nccl_variables();

// "NAME=VALUE NAME=VALUE" (spaces or newlines between pairs) → NAME → VALUE. UserError, one line naming
// `where`, for a pair without '=', an empty name, a name given twice, or a name NCCL does not read (with the
// nearest known name, and the list of valid ones).
std::map<std::string, std::string> parse_nccl_env(const std::string& text, const std::string& where);

}  // namespace meshtrain
