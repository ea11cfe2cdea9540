// Work: the handle of one collective. wait() orders the caller after the op (GPU: the caller's stream waits
// on the op's event; CPU: blocks until done) and rethrows the op's error, if any. wait() is idempotent.
#pragma once

#include <chrono>
#include <memory>

namespace meshtrain::comm {

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace meshtrain::comm
