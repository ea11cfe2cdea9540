// CpuWork; see cpu_work.h.
#include "comm/cpu/cpu_work.h"

namespace meshtrain::comm {

void CpuWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool CpuWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void CpuWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace meshtrain::comm
