// Defaults of the Communicator interface; see communicator.h.
#include "meshtrain/comm/communicator.h"

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

std::shared_ptr<Communicator> Communicator::split(int /*color*/, int /*key*/) {
  throw Error(cat("split() is not supported by the '", backend_name(), "' communicator backend"));
}

}  // namespace meshtrain::comm
