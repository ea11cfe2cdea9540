// NCCL communicator setup; see nccl_bootstrap.h. Compiled only with MESHTRAIN_WITH_CUDA.
#ifdef MESHTRAIN_WITH_CUDA

#include "comm/nccl/nccl_bootstrap.h"

#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "comm/nccl/nccl_utils.h"
#include "meshtrain/comm/comm_timeout_error.h"
#include "meshtrain/comm/attempt_key.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

namespace {

std::uint64_t next_generation(const std::string& group) {
  static std::mutex mu;
  static std::map<std::string, std::uint64_t> counts;
  std::lock_guard<std::mutex> lock(mu);
  return counts[group]++;
}

}  // namespace

ncclResult_t nccl_wait_ready(ncclComm_t comm, std::chrono::steady_clock::time_point deadline,
                             const std::atomic<bool>* stop) {
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline || (stop && stop->load())) return ncclInProgress;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

ncclComm_t nccl_init_rank(const StorePtr& store, int rank, int size, const std::string& group, int device,
                          std::chrono::milliseconds timeout) {
  MT_USER_CHECK(size >= 1 && rank >= 0 && rank < size, "NCCL communicator '", group, "': rank ", rank,
                " is not in [0, ", size, ")");
  MT_USER_CHECK(store || size == 1, "NCCL communicator '", group, "': a store is needed for size ", size);
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  MT_USER_CHECK(device >= 0 && device < devices, "NCCL communicator '", group, "': cuda:", device,
                " does not exist (", devices, " visible CUDA devices; check LOCAL_RANK and CUDA_VISIBLE_DEVICES)");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // Numbered per incarnation: a replacement worker's first "world" meets the survivors' first of the regroup.
  const std::string attempt = attempt_key();
  const std::string prefix =
      cat("meshtrain/nccl/", attempt, "/", group, "/gen", next_generation(attempt + "/" + group), "/");

  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    if (size > 1) {
      const auto* b = reinterpret_cast<const uint8_t*>(&id);
      store->set(prefix + "uid", std::vector<uint8_t>(b, b + sizeof id));
    }
  } else {
    try {
      store->wait({prefix + "uid"}, timeout);
    } catch (const std::exception&) {
      throw CommTimeoutError(cat("NCCL communicator '", group, "' rank ", rank, " of ", size, ": rank 0 did not ",
                                 "publish the NCCL unique id within ", timeout.count(), " ms (did it create this group?)"));
    }
    const auto raw = store->get(prefix + "uid");
    MT_CHECK(raw.size() == sizeof id, "NCCL unique id under ", prefix, "uid has ", raw.size(), " bytes");
    std::memcpy(&id, raw.data(), sizeof id);
  }
  if (size > 1) store->set(prefix + "joined/" + std::to_string(rank), std::vector<uint8_t>{'1'});

  // Non-blocking: init (and every later call) returns at once and is polled, so a missing rank is a bounded
  // wait that can be aborted instead of a hang inside NCCL.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRankConfig(&comm, size, id, rank, &cfg), nullptr);
  const ncclResult_t r = nccl_wait_ready(comm, std::chrono::steady_clock::now() + timeout);
  if (r == ncclSuccess) {
    log::debug("nccl communicator '%s': rank %d of %d on cuda:%d", group.c_str(), rank, size, device);
    return comm;
  }
  const std::string why = nccl_error_text(r, comm);
  ncclCommAbort(comm);
  if (r != ncclInProgress) throw Error(cat("NCCL communicator '", group, "' rank ", rank, ": init failed: ", why));
  std::string missing;
  for (int p = 0; p < size && store; ++p) {
    if (!store->check({prefix + "joined/" + std::to_string(p)})) missing += cat(missing.empty() ? "" : ", ", p);
  }
  throw CommTimeoutError(cat("NCCL communicator '", group, "' rank ", rank, " of ", size, ": init did not finish within ",
                             timeout.count(), " ms; ",
                             missing.empty() ? "every rank had joined" : cat("ranks that had not joined: ", missing)));
}

}  // namespace meshtrain::comm

#endif  // MESHTRAIN_WITH_CUDA
