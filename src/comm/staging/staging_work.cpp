// StagingWork; see staging_work.h.
#include "comm/staging/staging_work.h"

namespace meshtrain::comm {

StagingWork::StagingWork(WorkPtr inner, std::vector<std::pair<at::Tensor, at::Tensor>> copy_back,
                         std::vector<at::Tensor> keep)
    : inner_(std::move(inner)), copy_back_(std::move(copy_back)), keep_(std::move(keep)) {}

void StagingWork::wait() {
  if (inner_) inner_->wait();
  std::lock_guard<std::mutex> lock(mu_);
  // non_blocking from pinned host memory: the copy is queued on the caller's current stream and the host
  // moves on; the caching host allocator keeps the pinned block until that copy has run, so dropping the
  // host tensor below is safe. Host-to-host copies (a non-contiguous CPU tensor) are synchronous anyway.
  for (auto& [target, host] : copy_back_) target.copy_(host, /*non_blocking=*/true);
  copy_back_.clear();
  keep_.clear();
}

bool StagingWork::is_completed() { return !inner_ || inner_->is_completed(); }

}  // namespace meshtrain::comm
