// The launcher's main loop: host the store, start the workers, watch them, and decide.
//
//   attempt k: fresh store round → spawn N workers → poll(signal pipe, worker pipes, monitor tick)
//     all exit 0                  → exit 0
//     first worker fails          → SIGTERM every worker's group, SIGKILL after --shutdown-timeout;
//                                   restart (k+1) while --max-restarts remain and the root cause did not
//                                   exit 2 (invalid input, restart_policy.h), else root-cause summary and
//                                   exit with the root cause's exit code (128+N for signal N; never 0)
//     the store lost (node ≠ 0)   → wait --rdzv-timeout for a replaced node 0's new store, then attempt 0 again
//     launcher gets a stop signal → forwarded to every group, SIGKILL after --shutdown-timeout, no
//                                   restart, exit 128+N; a second SIGINT SIGKILLs at once
//     SIGUSR1/SIGUSR2             → forwarded only; workers keep running (preemption notice)
//
// run() is the named steps below: start (store, other nodes, scratch), then per attempt run_attempt() (one
// WorkerGroup) and decide() (restart, or the exit code with its summary).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "meshtrain/launch/launch_plan.h"
#include "meshtrain/launch/worker_group.h"

namespace meshtrain::launch {

class NodeCoordinator;
class RendezvousHost;
class ScratchDir;

class Supervisor {
 public:
  explicit Supervisor(LaunchPlan plan);
  ~Supervisor();
  // Runs to completion; returns the launcher's exit code.
  int run();

 private:
  void start();
  // Joins round `attempt` (several nodes) and sets round_plan_: this node's rank and the node count of the round
  // (an elastic job's rounds may have fewer nodes). False: the round started without this node (elastic: it
  // asked for a restart, and joins the next).
  bool join_round(int attempt);
  GroupResult run_attempt(int attempt);
  GroupHooks hooks_for(int attempt);
  // The exit code, or nullopt to restart.
  std::optional<int> decide(int attempt, const GroupResult& r);
  std::optional<int> decide_with_nodes(int attempt, const GroupResult& r);
  // Before a restart: tells the next attempt's workers when the failure was seen (kFailureTimeEnv).
  void note_failure_time(const GroupResult& r);
  void print_summary(const GroupResult& r, int attempt);
  int interrupted();  // a stop signal received while waiting for other nodes, else 0
  std::unique_ptr<NodeCoordinator> connect_nodes() const;
  // After the store was lost (`why`), on a node that does not host it: waits --rdzv-timeout for node 0 to host a
  // new one (node 0 replaced; told apart from the lost one by its epoch) and connects to it. False: it did not
  // come (the error said), or this node hosts the store, or --max-restarts rejoins were made.
  bool rejoin_new_store(const std::string& why);

  LaunchPlan plan_;
  LaunchPlan round_plan_;  // plan_ with the round's node rank and node count (elastic membership)
  int world_ = 1;
  std::unique_ptr<SignalPipe> sigs_;
  std::unique_ptr<RendezvousHost> store_;
  std::unique_ptr<NodeCoordinator> nodes_;
  std::unique_ptr<ScratchDir> scratch_;
  std::unique_ptr<ScratchDir> host_memory_;  // the workers' in-memory checkpoints (kHostCheckpointDirEnv)
  std::string files_root_;
  CpuBindingPlan binding_;
  bool wrote_scratch_logs_ = false;
  bool replacing_ = false;  // the round joined was running: this node's workers replace its lost ones
  std::string token_;       // the job's store token
  std::string epoch_;       // the store's (NodeCoordinator::store_epoch), once known
  int store_rejoins_ = 0;
  bool renumber_ = false;   // a new store: the next attempt is its round 0
};

}  // namespace meshtrain::launch
