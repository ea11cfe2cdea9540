// NcclWork; see nccl_work.h. Compiled only with MESHTRAIN_WITH_CUDA.
#ifdef MESHTRAIN_WITH_CUDA

#include "comm/nccl/nccl_work.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <thread>

#include "meshtrain/comm/comm_timeout_error.h"

namespace meshtrain::comm {

void NcclOpStatus::fail(const std::string& why, bool timeout) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (state.load() != kPending) return;
    error = why;
    timed_out = timeout;
  }
  state.store(kFailed);
}

void NcclOpStatus::rethrow() {
  std::lock_guard<std::mutex> lock(mu);
  if (timed_out) throw CommTimeoutError(error);
  throw Error(error);
}

void NcclWork::wait() {
  if (status_->state.load() == NcclOpStatus::kFailed) status_->rethrow();
  if (!status_->end || status_->state.load() == NcclOpStatus::kDone) return;
  // The caller's stream (not the device, not the host) waits for the communication stream's end event.
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(status_->device));
  const cudaStream_t caller = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(status_->device)).stream();
  CUDA_CHECK(cudaStreamWaitEvent(caller, status_->end->get(), 0));
}

bool NcclWork::is_completed() {
  const int s = status_->state.load();
  if (s != NcclOpStatus::kPending) return true;
  return status_->end->query();
}

void NcclWork::synchronize() {
  // Polling rather than cudaEventSynchronize: after an abort the watchdog fails the op, and the host must see
  // that error instead of waiting on a stream that may never drain.
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const int s = status_->state.load();
    if (s == NcclOpStatus::kFailed) status_->rethrow();
    if (s == NcclOpStatus::kDone || !status_->end || status_->end->query()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
}

}  // namespace meshtrain::comm

#endif  // MESHTRAIN_WITH_CUDA
