// CPU backend of Communicator: TCP sockets between every pair of ranks, set up through the rendezvous store.
// Each rank listens on an ephemeral port and publishes host:port under
//   meshtrain/cpu_comm/attempt<TORCHELASTIC_RESTART_COUNT>/<group_name>/addr/<rank>
// then connects to every lower rank and accepts every higher one (through a Unix socket when both are on
// one host). Ops run on one background thread per communicator in issue order (so every rank must issue
// collectives in the same order, as with NCCL); Work wait() blocks and rethrows. Every socket wait is bounded by the op timeout: a rank that skips a collective
// makes the others throw CommTimeoutError (comm_timeout_error.h) naming op, sequence number, group and the missing peers. After any
// failure the communicator is broken and later ops fail at once. Group names must be unique per job attempt.
// Every op goes into the process's FlightRecorder; a failing op dumps it and asks the other ranks for theirs
// through the store (progress_board.h, docs/comm_nccl.md "Failure diagnosis").
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/store.h"

namespace meshtrain::comm {

struct CpuCommOptions {
  // Bound on every op (from its start on the op thread) and on connection setup.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // all_reduce and broadcast of at most this many bytes use the one-round direct algorithms, larger ones the
  // ring (env MESHTRAIN_CPU_COMM_SMALL_BYTES overrides).
  std::size_t small_message_bytes = std::size_t(64) << 10;
  // Before each op, exchange (seq, op, dtype, numel) with the ranks it involves and fail on a mismatch
  // instead of mixing up bytes: one extra small round trip per op (env MESHTRAIN_CPU_COMM_CHECK=1 turns it on).
  bool check_ops = false;
  // Peers on the same host (and network namespace) connect through abstract Unix sockets rather than TCP over
  // loopback (env MESHTRAIN_CPU_COMM_UNIX=0 forces TCP).
  bool same_host_unix = true;
  // When every rank of the communicator is on this host (all peers over Unix sockets), all_reduce above
  // small_message_bytes goes through shared memory (shm_all_reduce.h) instead of the ring (env
  // MESHTRAIN_CPU_COMM_SHM=0 turns it off). Must be set alike on every rank.
  bool same_host_shm = true;
  // SO_SNDBUF/SO_RCVBUF of every peer socket; 0 leaves the kernel's autotuning on (env
  // MESHTRAIN_CPU_COMM_SOCKET_BUFFER overrides).
  std::size_t socket_buffer_bytes = 0;
  // Address peers use to reach this rank; empty: MESHTRAIN_COMM_HOST, else the interface that routes to
  // MASTER_ADDR, else 127.0.0.1.
  std::string host;
};

// Collective over `size` processes calling it with the same group name; returns once all are connected.
// world size 1 opens no sockets.
CommPtr make_cpu_communicator(StorePtr store, int rank, int size, const std::string& group_name,
                              std::chrono::milliseconds timeout);
CommPtr make_cpu_communicator(StorePtr store, int rank, int size, const std::string& group_name,
                              const CpuCommOptions& options);

}  // namespace meshtrain::comm
