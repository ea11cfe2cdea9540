// Every rank's string, in rank order, over a communicator: how checkpoint ranks exchange their shard lists
// and block descriptions (small JSON texts) without a store.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

// Collective over `c`. Two all-gathers: the lengths, then the bytes padded to the longest. `device`: where
// `c` takes its tensors (the rank's GPU for NCCL, which refuses host tensors).
std::vector<std::string> all_gather_strings(comm::Communicator& c, const std::string& mine,
                                            const at::Device& device = at::kCPU);

}  // namespace meshtrain::ckpt
