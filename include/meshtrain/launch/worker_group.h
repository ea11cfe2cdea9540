// One attempt (a "round") of this node's workers: spawn them with their environment, CPU binding and log
// routes, watch them, and stop them all on the first failure, a stop signal, or a reason from outside (another
// node failed, the store died). What happens next (restart, summary, exit code) is the Supervisor's call.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/launch/cpu_binding.h"
#include "meshtrain/launch/launch_plan.h"
#include "meshtrain/launch/log_router.h"
#include "meshtrain/launch/root_cause.h"
#include "meshtrain/launch/signal_forwarder.h"
#include "meshtrain/launch/worker_env.h"
#include "meshtrain/launch/worker_process.h"

namespace meshtrain::launch {

struct GroupResult {
  std::optional<WorkerFailure> failure;  // the root cause: the first worker failure in time, if any
  // The other workers that failed in this attempt (not by our stop): consequences of the root cause, e.g.
  // by their own words because a peer vanished (broken pipe, connection reset).
  std::vector<WorkerFailure> consequences;
  int stop_signal = 0;                   // a stop signal the launcher received, if any
  std::string outside_stop;              // why the workers were stopped from outside (another node, the store)
  // A notice (SIGUSR1/SIGUSR2) forwarded to the workers. Workers that exit after it (the trainer checkpoints
  // and exits 128+SIGUSR1 on Slurm's preemption warning) are not restarted: the job is being preempted.
  int notice_signal = 0;
  // Set when a worker exited at that notice (exit code 128+N, or killed by N): a requested stop, not a
  // failure.
  int requested_stop = 0;
};

// What an attempt tells the rest of the launcher, and asks it, while it runs (multi-node coordination and
// the store helper's health live outside the attempt).
struct GroupHooks {
  std::function<std::optional<std::string>()> poll;      // every --monitor-interval: a reason to stop, if any
  std::function<void(const WorkerFailure&, int notice)> on_failure;  // the first local worker failure
  std::function<void(int)> on_stop_signal;               // the first stop signal to the launcher
};

// Watches the workers of one attempt. supervise() loops over four named steps until every worker is gone:
// wait (poll on the signal pipe, the worker pipes and the next deadline), signals (forward, stop),
// reaping (exits → root cause, consequences, requested stops), deadlines (the outside poll, SIGKILL after
// --shutdown-timeout).
class WorkerGroup {
 public:
  // Spawns the workers of attempt `attempt`; their files go under <files_root>/attempt_<k>/<rank>/.
  // `wrote_scratch_logs` is set when --redirects/--tee wrote files without --log-dir. `in_place`: how many
  // workers killed by a signal may be started again alone (plan.in_place_restart), the others left running to
  // regroup with them; their files go under <rank>/replacement_<n>/. `replacing`: every worker starts as the
  // replacement of a lost one (this node's launcher was lost with its workers; Membership::running).
  WorkerGroup(const LaunchPlan& plan, int attempt, const std::string& files_root, SignalPipe& sigs,
              bool& wrote_scratch_logs, const CpuBindingPlan& binding, int in_place = 0, bool replacing = false);
  // Runs until every worker is gone.
  GroupResult supervise(const GroupHooks& hooks);

 private:
  using Clock = std::chrono::steady_clock;
  WorkerIdentity identity_of(int local_rank) const;
  // Starts the worker `id` in `slot` (a new one at the end) with its files in `dir`, and routes its output.
  void spawn(size_t slot, WorkerIdentity id, const std::string& dir);
  // A worker killed by a signal, started again alone while in-place restarts remain; false: not one to replace.
  bool replace_in_place(size_t slot, int wait_status);
  void wait_for_events();
  void on_signals();
  void reap();
  void on_deadlines();
  void settle_root_cause();
  void stop_all(int sig);
  void kill_all();
  WorkerFailure failure_of(size_t i, int wait_status);
  bool any_running() const;

  const LaunchPlan& plan_;
  int attempt_;
  std::string base_;  // <files_root>/attempt_<k>
  bool& wrote_scratch_logs_;
  const CpuBindingPlan& binding_;  // the Supervisor's, which outlives the group
  int in_place_left_ = 0, replaced_ = 0;
  bool replacing_ = false;
  SignalPipe& sigs_;
  const GroupHooks* hooks_ = nullptr;  // set for the duration of supervise()
  GroupResult res_;
  bool stopping_ = false, killed_ = false;
  Clock::time_point deadline_{}, next_poll_{};
  std::vector<WorkerIdentity> ids_;
  // workers_ is declared after router_, so it is destroyed first: workers are SIGKILLed and reaped before
  // the router closes the pipes they write to, so no worker ever sees EPIPE from a launcher still alive.
  LogRouter router_;
  std::vector<WorkerProcess> workers_;
};

}  // namespace meshtrain::launch
