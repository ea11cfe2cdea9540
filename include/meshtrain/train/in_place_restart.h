// InPlaceRestart: a worker that outlives its run's failure. Under a meshrun that replaces a killed worker alone
// (launch/worker_env.h kInPlaceRestartEnv) and a run that resumes with checkpoint.resume auto, a worker whose
// run fails with anything but a user error (a peer gone, a collective timed out) does not exit: its run is torn
// down (communicators, loaders, background saves), it meets every other rank at a regroup barrier in the
// rendezvous store, and the run starts again in the same process, from the newest checkpoint every rank
// reaches (the in-memory snapshots first, train/memory_checkpoints.h). The replacement of a killed worker meets
// the survivors at the same barrier. What is kept is the process: its start, the libraries loaded, the CUDA
// context and the caching allocator's memory.
//
// Barrier keys (workers' namespace of the store), per launcher attempt k:
//   meshtrain/regroup/attempt<k>/rank<r>        counter: how many regroups rank r's incarnations entered; the
//                                               value returned by the add is the generation g to meet in
//   meshtrain/regroup/attempt<k>/gen<g>/<r>     rank r has arrived in generation g
// Every rank enters each regroup once, so all meet in the same g; the communicators of generation g use their
// own store keys (comm/attempt_key.h). A rank lost again while regrouping shifts its count: the others' next
// collective times out and they regroup once more, in step. Ranks that do not all arrive within
// parallel.timeout_s end the worker with the error (exit 1): the launcher then restarts the whole group.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config.h"  // IWYU pragma: keep

namespace meshtrain::train {

class InPlaceRestart {
 public:
  // Reads the launcher's environment; off outside such a meshrun or without checkpoint.resume auto.
  explicit InPlaceRestart(const Config& cfg);

  // A replacement worker (kReplacementEnv) meets the survivors before its first run; no-op otherwise.
  void join_if_replacement();

  // After `error` ended this worker's run: true once every rank has regrouped (run again); false when the error
  // is the process's to exit with (off, a user error, --max-restarts regroups done). Throws Error naming the
  // ranks that did not arrive within parallel.timeout_s.
  bool regroup_after(const std::exception& error);

 private:
  void regroup(const std::string& why);
  void meet(const std::string& why);  // the barrier itself; regroup() words the store's errors

  comm::WorldInfo world_;
  bool enabled_ = false;
  int max_regroups_ = 0;  // TORCHELASTIC_MAX_RESTARTS
  int attempt_ = 0;       // TORCHELASTIC_RESTART_COUNT
  std::chrono::milliseconds timeout_{0};
};

}  // namespace meshtrain::train
