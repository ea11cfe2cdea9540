// The launcher's main loop: host the store, start the workers, watch them, and decide.
//
//   attempt k: fresh store round → spawn N workers → poll(signal pipe, worker pipes, monitor tick)
//     all exit 0                  → exit 0
//     first worker fails          → SIGTERM every worker's group, SIGKILL after --shutdown-timeout;
//                                   restart (k+1) while --max-restarts remain, else root-cause summary and
//                                   exit with the root cause's exit code (128+N for signal N)
//     launcher gets a stop signal → forwarded to every group, SIGKILL after --shutdown-timeout, no
//                                   restart, exit 128+N; a second SIGINT SIGKILLs at once
//     SIGUSR1/SIGUSR2             → forwarded only; workers keep running (preemption notice)
#pragma once

#include <string>

#include "meshtrain/launch/launch_plan.h"

namespace meshtrain::launch {

class Supervisor {
 public:
  explicit Supervisor(LaunchPlan plan) : plan_(std::move(plan)) {}
  // Runs to completion; returns the launcher's exit code.
  int run();

 private:
  LaunchPlan plan_;
};

}  // namespace meshtrain::launch
