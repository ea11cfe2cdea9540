// Which connection of the rendezvous store may touch which key. Every connection says in its HELLO whom it
// speaks for (store_protocol.h), proven by the job's token:
//
//   launcher of node N  only keys under "meshrun/" (node_coordinator.h): the round counters, the failure
//                       cause, and its own "meshrun/nproc/N" and "meshrun/end/<round>/N" (another node's
//                       worker count and round marker are read-only); "meshrun/epoch" is node 0's only
//   workers of node N   every key but those under "meshrun/": PyTorch's and meshtrain's rendezvous
//                       (/worker/attempt_<k>/..., the communicators' keys); they cannot forge a failure, a
//                       join or another node's record
//
// Keys are compared as they travel: TCPStore clients put "/" in front, so "/meshrun/x" and "meshrun/x" are
// the same namespace here.
#pragma once

#include <string>

#include "meshtrain/launch/store_protocol.h"

namespace meshtrain::launch {

// Empty when a connection of `role` for node `node` may read (write = false) or change (write = true) `key`;
// else why not, in words for the server's one line.
std::string store_key_refusal(PeerRole role, int node, const std::string& key, bool write);

}  // namespace meshtrain::launch
