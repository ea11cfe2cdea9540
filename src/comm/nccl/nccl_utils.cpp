// NCCL/CUDA helpers; see nccl_utils.h. Compiled only with MESHTRAIN_WITH_CUDA.
#ifdef MESHTRAIN_WITH_CUDA

#include "comm/nccl/nccl_utils.h"

namespace meshtrain::comm {

std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += cat(": ", last);
  return s;
}

ncclDataType_t nccl_dtype(c10::ScalarType t, const std::string& what) {
  switch (t) {
    case c10::ScalarType::Float: return ncclFloat32;
    case c10::ScalarType::BFloat16: return ncclBfloat16;
    case c10::ScalarType::Half: return ncclFloat16;
    case c10::ScalarType::Int: return ncclInt32;
    case c10::ScalarType::Long: return ncclInt64;
    default: break;
  }
  throw UserError(cat(what, " has dtype ", c10::toString(t),
                      "; the NCCL communicator takes Float, BFloat16, Half, Int or Long"));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;  // NCCL ≥ 2.10: pre-scaled sum for floats, sum then divide for integers
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

CudaEvent::CudaEvent(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (ev_ != nullptr) cudaEventDestroy(ev_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (ev_ != nullptr) cudaEventDestroy(ev_);
    ev_ = o.ev_;
    o.ev_ = nullptr;
  }
  return *this;
}

void CudaEvent::record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(ev_, s)); }

bool CudaEvent::query() const {
  const cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  CUDA_CHECK(e);
  return false;
}

}  // namespace meshtrain::comm

#endif  // MESHTRAIN_WITH_CUDA
