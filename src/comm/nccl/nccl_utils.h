// NCCL/CUDA helpers of the NCCL backend (only built with MESHTRAIN_WITH_CUDA): NCCL's return-code check that
// names the call (CUDA's is core/cuda_check.h), dtype / reduce-op mapping, and an owning CUDA event.
#pragma once

#include <c10/core/ScalarType.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/cuda_check.h"
#include "meshtrain/core/error.h"

// Throws Error with the NCCL error string (and NCCL's last error message, which says which peer or resource).
#define NCCL_CHECK(expr, ncomm)                                                                             \
  do {                                                                                                      \
    ncclResult_t mt_r_ = (expr);                                                                            \
    if (mt_r_ != ncclSuccess && mt_r_ != ncclInProgress) {                                                  \
      throw ::meshtrain::Error(::meshtrain::cat(__FILE__, ":", __LINE__, ": " #expr ": ",                   \
                                                ::meshtrain::comm::nccl_error_text(mt_r_, ncomm)));          \
    }                                                                                                       \
  } while (0)

namespace meshtrain::comm {

// "unhandled system error (remote process exited or there was a network error): <last error>"
std::string nccl_error_text(ncclResult_t r, ncclComm_t comm);

// The NCCL type of a supported dtype (fp32, bf16, fp16, int32, int64); UserError for others.
ncclDataType_t nccl_dtype(c10::ScalarType t, const std::string& what);
ncclRedOp_t nccl_op(ReduceOp op);

// An owned CUDA event without timing (cheapest to record and query). Non-copyable, movable.
class CudaEvent {
 public:
  // `timing`: the event can be an end of cudaEventElapsedTime (a little dearer to record).
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : ev_(o.ev_) { o.ev_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(cudaStream_t s);
  // True once the work recorded before it has finished; throws on a CUDA error.
  bool query() const;
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

}  // namespace meshtrain::comm
