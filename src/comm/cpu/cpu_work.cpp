// CpuWork; see cpu_work.h.
#include "comm/cpu/cpu_work.h"

#include <chrono>

#include "meshtrain/comm/wait_clock.h"

namespace meshtrain::comm {

void CpuWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, [this] { return done_; });
    add_blocked_in_wait(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
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
