// Every rank's string, in rank order, over a communicator: how checkpoint ranks exchange their shard lists
// and block descriptions (small JSON texts) without a store.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

// Collective over `c`. Two all-gathers (on c.device()): the lengths, then the bytes padded to the longest.
std::vector<std::string> all_gather_strings(comm::Communicator& c, const std::string& mine);

}  // namespace meshtrain::ckpt
