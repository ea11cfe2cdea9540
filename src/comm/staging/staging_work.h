// StagingWork: the Work of a StagingCommunicator op. It holds the backend's Work, the host copies the op
// reads and writes, and the caller's tensors that receive results. wait() waits for the backend's op, then
// (once) copies each host result back into its caller tensor on the caller's current stream, so the
// consumers queued on that stream afterwards see it; the host buffers stay alive until then. Until wait()
// the caller's tensors hold their old values, even when is_completed() is already true.
#pragma once

#include <ATen/core/Tensor.h>

#include <mutex>
#include <utility>
#include <vector>

#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

class StagingWork final : public Work {
 public:
  // (caller tensor, host result) pairs copied back at wait(); `keep`: host inputs the op reads.
  StagingWork(WorkPtr inner, std::vector<std::pair<at::Tensor, at::Tensor>> copy_back, std::vector<at::Tensor> keep);

  // Waits for the backend's op (rethrowing its error, every time) and copies the results back once.
  void wait() override;
  // True once the backend's op is done (the copy-back happens in wait()).
  bool is_completed() override;

 private:
  WorkPtr inner_;  // null: nothing to wait for (a group of one)
  std::mutex mu_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;
  std::vector<at::Tensor> keep_;
};

}  // namespace meshtrain::comm
