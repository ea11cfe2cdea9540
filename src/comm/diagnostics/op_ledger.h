// OpLedger: the bookkeeping every backend keeps around its ops, in one place. It numbers the ops
// (collectives in one sequence, point-to-point ops per peer, so the numbers agree across ranks), enters each
// into the process's FlightRecorder and follows it there (issued → started → completed / failed / timed
// out), tells the group's ProgressBoard when this rank arrives at and completes a collective (so a timed-out
// rank can name the ranks that never arrived), and holds the communicator's broken state: after the first
// failure nothing later can be trusted, and the reason is kept to fail every later op with. On a failure
// report() writes this process's flight recorder and asks the other ranks for theirs.
//
// When an op counts as started is the backend's call: the CPU backend's op thread when it picks the op up,
// the NCCL backend's watchdog when the op's start event has completed on the GPU. Thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/diagnostics/flight_recorder.h"
#include "comm/diagnostics/progress_board.h"
#include "meshtrain/comm/store.h"

namespace meshtrain::comm {

class OpLedger {
 public:
  struct Op {
    std::uint64_t seq = 0;     // in the group's collective sequence, or per peer for p2p
    std::uint64_t rec_id = 0;  // FlightRecorder entry
    int peer = -1;             // p2p: the other rank; -1: a collective
  };

  // A ProgressBoard is kept for groups of more than one rank that have a store.
  OpLedger(StorePtr store, std::string group, int rank, int size);

  // Numbers `op` and enters it into the flight recorder; `t`: the tensor whose dtype and size it notes
  // (undefined for barrier-like ops). Ops are numbered in the order of the calls.
  Op issue(const std::string& op, int peer, const at::Tensor& t);
  void started(const Op& op);  // flight recorder: running
  void arrived(const Op& op);  // progress board: this rank has reached this collective (p2p: nothing)
  void completed(const Op& op);  // flight recorder and progress board
  void failed(const Op& op, bool timed_out);  // flight recorder only

  // Marks the communicator broken; only the first reason is kept. Returns whether this call broke it.
  bool break_with(const std::string& why, bool timed_out);
  // The reason, "" while healthy.
  std::string broken() const;
  bool broken_by_timeout() const;

  // Writes this process's flight recorder (reason `why`) and asks every rank of the job for theirs
  // (`request`: the reason they are given).
  void report(const std::string& why, const std::string& request);
  // Ranks that had not arrived at collective `seq` (progress_board.h), "" when all had or without a board.
  std::string not_arrived(std::uint64_t seq);

 private:
  std::string group_;
  int rank_, size_;
  std::unique_ptr<ProgressBoard> board_;
  mutable std::mutex mu_;  // the counters and the broken state
  std::uint64_t next_seq_ = 0;
  std::vector<std::uint64_t> p2p_seq_;  // per peer
  std::string broken_;
  bool broken_timeout_ = false;
};

}  // namespace meshtrain::comm
