// NCCL backend of Communicator (docs/architecture.md "GPU collectives: NCCL directly"); built only with
// MESHTRAIN_WITH_CUDA (make_communicator names the missing build otherwise).
//
// Setup: rank 0 creates the unique id and publishes it in the store under
//   meshtrain/nccl/<attempt>/<group>/gen<g>/uid
// (g counts the communicators this process made under that group name, so re-creating a group never reads
// a stale id); every rank then joins with ncclCommInitRankConfig in non-blocking mode, so that init and every
// later call can be bounded by the timeout and aborted. split() is ncclCommSplit.
//
// Streams: each communicator owns one communication stream on its device. An op records an event on the
// caller's current stream, makes the communication stream wait on it (so the inputs are ready), issues the
// NCCL call there and records an end event; Work::wait() makes the caller's then-current stream wait on that
// end event. No device-wide or host synchronisation anywhere (barrier() alone blocks the host, by contract).
// Tensors are recorded with the caching allocator on the communication stream and held until the watchdog
// sees the op complete, so neither the caller dropping them nor the allocator can reuse their memory early.
//
// Failures: a watchdog thread per communicator polls ncclCommGetAsyncError and the age of every op in flight.
// On an async error or an op older than the timeout it aborts this communicator (and every other NCCL
// communicator of the process: they would hang on the same peers), writes the flight recorder, asks the other
// ranks for theirs, and from then on wait() on unfinished ops and every new op throw an error naming op,
// sequence number, group and the ranks that had not arrived (from the ProgressBoard in the store).
#pragma once

#include <chrono>
#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/store.h"

namespace meshtrain::comm {

struct NcclCommOptions {
  // Bound on init, on split, and on every op from its issue to its completion on the GPU.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // How often the watchdog checks for async errors, timeouts and completed ops.
  std::chrono::milliseconds watchdog_period{std::chrono::milliseconds(100)};
};

// Collective over `size` processes calling it with the same group name; `device` is this rank's CUDA device
// index. Returns once every rank has joined (or throws naming the ranks that had not, after the timeout).
CommPtr make_nccl_communicator(StorePtr store, int rank, int size, const std::string& group_name, int device,
                               const NcclCommOptions& options);

}  // namespace meshtrain::comm
