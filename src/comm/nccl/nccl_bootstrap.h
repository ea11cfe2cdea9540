// Setting up an NCCL communicator (only built with MESHTRAIN_WITH_CUDA): the unique id through the store and
// a non-blocking ncclCommInitRankConfig bounded by the timeout, plus the poll that every non-blocking NCCL
// call needs before the next one.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <string>

#include "meshtrain/comm/store.h"

namespace meshtrain::comm {

// Polls ncclCommGetAsyncError until the communicator's last call is no longer in progress. Returns its final
// state, or ncclInProgress when `deadline` passed (or *stop became true) first.
ncclResult_t nccl_wait_ready(ncclComm_t comm, std::chrono::steady_clock::time_point deadline,
                             const std::atomic<bool>* stop = nullptr);

// Rank 0 makes the unique id and sets it under
//   meshtrain/nccl/<attempt>/<group>/gen<g>/uid
// (g: how many communicators of this name the process made before); every rank marks itself under
// .../joined/<rank> and joins. Throws CommTimeoutError naming the ranks that had not joined after `timeout`,
// Error for an NCCL failure, UserError for a bad device or rank.
ncclComm_t nccl_init_rank(const StorePtr& store, int rank, int size, const std::string& group, int device,
                          std::chrono::milliseconds timeout);

}  // namespace meshtrain::comm
