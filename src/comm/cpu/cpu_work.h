// CpuWork: the Work of the CPU backend. The communicator's op thread completes it (finish) once the op has run;
// wait() blocks the caller until then and rethrows the op's exception, every time it is called.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

class CpuWork final : public Work {
 public:
  void wait() override;
  bool is_completed() override;
  // Called once by the op thread; `error` is null on success.
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace meshtrain::comm
