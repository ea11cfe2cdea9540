// CommTimeoutError: a collective (or p2p op, or a communicator's set-up) did not complete before its timeout.
// Every backend throws it (the CPU backend's transfers, the NCCL backend's watchdog and bootstrap) and callers
// tell it from other failures by type: the message names the op, its sequence number, the group and the ranks
// that did not deliver (docs/comm.md, "Timeouts and failures").
#pragma once

#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

class CommTimeoutError : public Error {
 public:
  explicit CommTimeoutError(const std::string& what) : Error(what) {}
};

}  // namespace meshtrain::comm
