// NcclWork: the Work of the NCCL backend (only built with MESHTRAIN_WITH_CUDA). wait() does not block the host:
// it makes the caller's current stream wait on the op's end event (recorded on the communicator's stream right
// after the NCCL call), so compute queued afterwards runs after the op and nothing else is synchronised.
// The watchdog marks the op completed (end event done) or failed (timeout / async error → abort); wait() on a
// failed op throws that error.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/nccl/nccl_utils.h"
#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

// What the communicator's watchdog and the Work share about one op.
struct NcclOpStatus {
  std::optional<CudaEvent> end;  // recorded after the NCCL call; none for a no-op (size 0)
  int device = 0;
  std::atomic<int> state{0};     // kPending, kDone, kFailed
  std::mutex mu;                 // guards error/timed_out (written once, before state becomes kFailed)
  std::string error;
  bool timed_out = false;

  static constexpr int kPending = 0, kDone = 1, kFailed = 2;
  void fail(const std::string& why, bool timeout);
  [[noreturn]] void rethrow();
};

class NcclWork final : public Work {
 public:
  explicit NcclWork(std::shared_ptr<NcclOpStatus> status) : status_(std::move(status)) {}

  // The caller's current stream (on the op's device) waits on the op's end event; throws if the op failed.
  void wait() override;
  // True once the op's end event has completed or the op failed.
  bool is_completed() override;
  // Blocks the host until the op is done (polling, so a watchdog failure ends the wait); throws on failure.
  void synchronize();

 private:
  std::shared_ptr<NcclOpStatus> status_;
};

}  // namespace meshtrain::comm
