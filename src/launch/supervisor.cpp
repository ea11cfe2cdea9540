#include "meshtrain/launch/supervisor.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/cpu_binding.h"
#include "meshtrain/launch/failure_cause.h"
#include "meshtrain/launch/node_coordinator.h"
#include "meshtrain/launch/rdzv_token.h"
#include "meshtrain/launch/rendezvous_host.h"
#include "meshtrain/launch/restart_policy.h"
#include "meshtrain/launch/root_cause.h"
#include "meshtrain/launch/scratch_dir.h"
#include "meshtrain/launch/signal_forwarder.h"
#include "meshtrain/launch/signal_names.h"
#include "meshtrain/launch/store_client.h"
#include "meshtrain/launch/worker_env.h"

namespace meshtrain::launch {
namespace {

// The CPU binding for this node's workers (cpu_binding.h), with a line when it cannot be applied.
CpuBindingPlan bind_near_gpus(const LaunchPlan& plan) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  // MESHRUN_SYSFS_ROOT: read the topology from a copy of /sys (tests use a fixture tree; a support engineer
  // can replay a user's machine).
  const char* sysfs_root = std::getenv("MESHRUN_SYSFS_ROOT");
  CpuBindingPlan b = plan_cpu_binding(parse_numa_binding(plan.opts.numa_binding), plan.opts.numa_binding,
                                      plan.nproc_per_node, cvd ? std::optional<std::string>(cvd) : std::nullopt,
                                      allowed_cpus(), hw::SysfsTopology(sysfs_root ? sysfs_root : ""));
  // On a node without GPUs the default binding has nothing to do; say so only when it was asked for.
  if (!b.problem.empty() && (plan.gpu_count > 0 || plan.opts.explicitly_set.count("numa-binding")))
    log::warn("%s", b.problem.c_str());
  return b;
}

}  // namespace

Supervisor::Supervisor(LaunchPlan plan) : plan_(std::move(plan)) {}
Supervisor::~Supervisor() = default;

int Supervisor::run() {
  start();
  for (int attempt = 0;; ++attempt) {
    if (!join_round(attempt)) continue;  // late for this round: the next one admits this node
    const GroupResult r = run_attempt(attempt);
    if (auto code = decide(attempt, r)) return *code;
    note_failure_time(r);
    if (std::exchange(renumber_, false)) attempt = -1;  // a new store: its rounds count from 0 on every node
  }
}

// Store, other nodes, scratch directory, CPU binding, and the start-up lines.
void Supervisor::start() {
  sigs_ = std::make_unique<SignalPipe>(plan_.forwarded_signals);
  const auto rdzv_timeout = std::chrono::milliseconds(static_cast<long long>(plan_.opts.rdzv_timeout * 1000));
  const char* env_token = std::getenv(kRdzvTokenEnv);
  const std::string token = resolve_rdzv_token(env_token ? env_token : "", plan_.opts.rdzv_token_file,
                                               plan_.node_rank, plan_.nnodes, rdzv_timeout);
  // Node 0: the store on the --master-addr interface; every node: its workers' relay (rendezvous_host.h).
  store_ = std::make_unique<RendezvousHost>(RendezvousSpec{plan_.host_store, plan_.master_addr, plan_.master_port,
                                                           plan_.nnodes, plan_.node_rank, token, plan_.store_exe});
  plan_.master_port = store_->port();
  plan_.relay_port = store_->relay_port();
  // Reached before anything is printed: an unreachable master is then the one line the user sees.
  token_ = token;
  if (plan_.nnodes > 1) {
    nodes_ = connect_nodes();
    // The workers' MASTER_ADDR is the relay's loopback address; the CPU backend would advertise loopback to
    // the other nodes from it, so it is told the interface that reaches the store (unless the user chose).
    if (!std::getenv("MESHTRAIN_COMM_HOST") && !plan_.worker_env.count("MESHTRAIN_COMM_HOST"))
      plan_.worker_env["MESHTRAIN_COMM_HOST"] = nodes_->local_address();
  }
  scratch_ = std::make_unique<ScratchDir>();
  host_memory_ = std::make_unique<ScratchDir>(host_memory_parent());
  plan_.worker_env[kHostCheckpointDirEnv] = host_memory_->path();
  if (plan_.in_place_restart) plan_.worker_env[kInPlaceRestartEnv] = "1";
  files_root_ = plan_.log_folder.empty() ? scratch_->path() : plan_.log_folder;
  world_ = plan_.nnodes * plan_.nproc_per_node;
  log::info("meshrun: %d worker(s) on this node (node %d of %d, world size %d), store %s:%d%s, run id %s",
            plan_.nproc_per_node, plan_.node_rank, plan_.nnodes, world_, plan_.master_addr.c_str(),
            plan_.master_port, plan_.host_store ? " (hosted here)" : "", plan_.run_id.c_str());
  if (!plan_.log_folder.empty()) log::info("meshrun: logs under %s", plan_.log_folder.c_str());
  if (plan_.kind != ProgramKind::Config && plan_.gpu_count > 0 && plan_.nproc_per_node > plan_.gpu_count)
    log::warn("meshrun: %d workers but %d GPU(s) on this node: right for a CPU backend (gloo), but NCCL needs "
              "one GPU per worker", plan_.nproc_per_node, plan_.gpu_count);
  binding_ = bind_near_gpus(plan_);
}

std::unique_ptr<NodeCoordinator> Supervisor::connect_nodes() const {
  const auto rdzv_timeout = std::chrono::milliseconds(static_cast<long long>(plan_.opts.rdzv_timeout * 1000));
  return std::make_unique<NodeCoordinator>(plan_.master_addr, plan_.master_port, plan_.nnodes, plan_.min_nnodes,
                                           plan_.node_rank, plan_.nproc_per_node, rdzv_timeout, token_);
}

bool Supervisor::rejoin_new_store(const std::string& why) {
  if (plan_.host_store || store_rejoins_ >= plan_.opts.max_restarts) return false;
  log::warn("%s; waiting up to %.0f s (--rdzv-timeout) for node 0 to host the store again (node 0 replaced)",
            why.c_str(), plan_.opts.rdzv_timeout);
  try {
    auto fresh = connect_nodes();
    const std::string epoch = fresh->store_epoch();
    if (epoch == epoch_) {
      log::error("meshrun: the store at %s answers again, but it is the one this node lost (epoch %s): its rounds "
                 "went on without this node, which cannot rejoin them", fresh->endpoint().c_str(), epoch.c_str());
      return false;
    }
    nodes_ = std::move(fresh);
    epoch_ = epoch;
  } catch (const Error& e) {
    log::error("%s", e.what());
    return false;
  }
  ++store_rejoins_;
  log::warn("meshrun: node 0 hosts a new store (epoch %s): the job starts again on every node from round 0, resuming "
            "from the newest checkpoint (store rejoin %d of --max-restarts %d)", epoch_.c_str(), store_rejoins_,
            plan_.opts.max_restarts);
  return true;
}

int Supervisor::interrupted() {
  for (int s : sigs_->drain())
    if (s != SIGCHLD && is_stop_signal(s)) return s;
  return 0;
}

GroupHooks Supervisor::hooks_for(int attempt) {
  GroupHooks hooks;
  hooks.poll = [this, attempt]() -> std::optional<std::string> {
    if (store_) {
      if (auto st = store_->exited())
        return cat("the rendezvous ", plan_.host_store ? "store" : "relay", " (meshrun-store, pid ", store_->pid(),
                   ") exited with ",
                   describe_status(*st));
    }
    if (!nodes_) return std::nullopt;
    try {
      if (nodes_->failed(attempt)) return cat("another node reported a failure in round ", attempt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  };
  auto report = [this, attempt](int code, bool stop, const std::string& cause) {
    if (!nodes_) return;
    try {
      nodes_->report(attempt, code, stop, cause);
    } catch (const Error& e) {
      log::warn("%s", e.what());
    }
  };
  hooks.on_failure = [this, report](const WorkerFailure& f, int notice) {
    report(exit_code_of(f.wait_status), notice != 0,
           cat("rank ", f.rank, " on node ", plan_.node_rank, " (host ", f.host, ", pid ", f.pid, "): ",
               describe_status(f.wait_status), notice ? cat(" after ", signal_name(notice)) : std::string()));
  };
  hooks.on_stop_signal = [this, report](int s) {
    report(128 + s, true, cat("node ", plan_.node_rank, "'s launcher got ", signal_name(s)));
  };
  return hooks;
}

void Supervisor::note_failure_time(const GroupResult& r) {
  // This node's own failed worker, else the moment this node learnt of another node's failure.
  const auto when = r.failure ? r.failure->when : std::chrono::system_clock::now();
  plan_.worker_env[kFailureTimeEnv] = failure_time_value(when);
}

bool Supervisor::join_round(int attempt) {
  round_plan_ = plan_;
  if (!nodes_) return true;
  const Membership m = nodes_->join(attempt, [this] { return interrupted(); });
  if (!m.has(plan_.node_rank)) {
    log::warn("meshrun: round %d started without node %d (it joined after the round's nodes were decided); asking "
              "the other nodes to restart so that the next round admits it", attempt, plan_.node_rank);
    nodes_->report(attempt, 1, false, cat("node ", plan_.node_rank, " joined round ", attempt, " late: the job "
                                          "restarts to admit it (--nnodes ", plan_.min_nnodes, ":", plan_.nnodes, ")"));
    return false;
  }
  replacing_ = m.running && plan_.in_place_restart;
  if (replacing_)
    log::warn("meshrun: round %d is running with this node in it (its earlier launcher was lost): starting this "
              "node's workers in place of the lost ones; the other nodes' workers regroup with them", attempt);
  if (epoch_.empty()) epoch_ = nodes_->store_epoch();  // set by node 0 before it joined
  round_plan_.nnodes = static_cast<int>(m.nodes.size());
  round_plan_.node_rank = m.rank_of(plan_.node_rank);
  const int world = round_plan_.nnodes * plan_.nproc_per_node;
  std::string nodes;
  for (int n : m.nodes) nodes += cat(nodes.empty() ? "" : ", ", n);
  if (world != world_)
    log::warn("meshrun: round %d runs on %d node(s) (%s), world size %d; this node's workers are ranks %d..%d",
              attempt, round_plan_.nnodes, nodes.c_str(), world,
              round_plan_.node_rank * plan_.nproc_per_node, (round_plan_.node_rank + 1) * plan_.nproc_per_node - 1);
  world_ = world;
  return true;
}

// One attempt: run the round's group to its end, note where its files went.
GroupResult Supervisor::run_attempt(int attempt) {
  GroupResult r;
  {
    // In-place restarts share --max-restarts with the group's: those left after this attempt's.
    const int in_place = round_plan_.in_place_restart ? plan_.opts.max_restarts - attempt : 0;
    WorkerGroup group(round_plan_, attempt, files_root_, *sigs_, wrote_scratch_logs_, binding_, in_place,
                      std::exchange(replacing_, false));
    r = group.supervise(hooks_for(attempt));
  }
  if (wrote_scratch_logs_) {
    scratch_->keep_all();
    log::info("meshrun: redirected/teed logs are in %s", scratch_->path().c_str());
  }
  return r;
}

// The root-cause summary; the error file it names is kept after meshrun exits.
void Supervisor::print_summary(const GroupResult& r, int attempt) {
  if (!r.failure) return;
  std::fputs(format_root_cause(*r.failure, attempt + 1, world_, r.consequences).c_str(), stderr);
  std::fflush(stderr);
  if (!read_error_file(r.failure->error_file).empty()) scratch_->keep(r.failure->error_file);
}

std::optional<int> Supervisor::decide(int attempt, const GroupResult& r) {
  if (nodes_) return decide_with_nodes(attempt, r);
  if (r.stop_signal) {
    print_summary(r, attempt);
    log::warn("meshrun: stopped by %s; exiting with %d", signal_name(r.stop_signal).c_str(), 128 + r.stop_signal);
    return 128 + r.stop_signal;
  }
  if (!r.outside_stop.empty() && !r.failure) {
    log::error("meshrun: %s; exiting with 1", r.outside_stop.c_str());
    return 1;
  }
  if (r.requested_stop && !r.failure) {
    log::warn("meshrun: workers stopped at the requested %s (a preemption notice): no restart; exiting with %d",
              signal_name(r.requested_stop).c_str(), 128 + r.requested_stop);
    return 128 + r.requested_stop;
  }
  if (!r.failure) return 0;
  const int code = exit_code_of(r.failure->wait_status);
  if (r.notice_signal) {
    log::warn("meshrun: rank %d exited with %s after %s was forwarded (a preemption notice): no restart; "
              "exiting with %d", r.failure->rank, describe_status(r.failure->wait_status).c_str(),
              signal_name(r.notice_signal).c_str(), code);
    return code;
  }
  const int left = plan_.opts.max_restarts - attempt;
  const std::string why = no_restart_line(code, cat("rank ", r.failure->rank, " (pid ", r.failure->pid, ")"), left);
  if (why.empty() && left > 0) {
    log::warn("meshrun: restarting the worker group (restart %d of %d)", attempt + 1, plan_.opts.max_restarts);
    return std::nullopt;
  }
  print_summary(r, attempt);
  if (!why.empty()) log::warn("%s", why.c_str());
  return code;
}

// Several nodes: the round's outcome is agreed through the store (node_coordinator.h). Whatever the store
// says, a failed job exits non-zero (failure_cause.h).
std::optional<int> Supervisor::decide_with_nodes(int attempt, const GroupResult& r) {
  std::optional<int> local;  // this node's own account: its root-cause worker, or a stop signal it got
  if (r.failure) local = exit_code_of(r.failure->wait_status);
  else if (r.stop_signal) local = 128 + r.stop_signal;
  RoundOutcome out;
  try {
    out = nodes_->finish(attempt, [this] { return interrupted(); });
  } catch (const StoreLost& e) {
    if (!r.stop_signal && rejoin_new_store(e.what())) {
      renumber_ = true;
      return std::nullopt;
    }
    log::error("%s", e.what());
    print_summary(r, attempt);
    return local && is_failure_exit_code(*local) ? *local : 1;
  } catch (const Error& e) {
    log::error("%s", e.what());
    print_summary(r, attempt);
    return local && is_failure_exit_code(*local) ? *local : 1;
  }
  if (!out.failed && !local) {
    nodes_->leave(attempt);
    return 0;
  }
  if (!out.failed) {  // our report did not reach the store (a warning said why): our workers still failed
    out.failed = out.cause.stop = true;
    out.cause.problem = cat("node ", plan_.node_rank, "'s workers failed, but the store recorded no failure in round ",
                            attempt);
  }
  const FailureCause& c = out.cause;
  const int left = plan_.opts.max_restarts - attempt;
  const std::string why = c.stop ? std::string() : no_restart_line(c.exit_code, c.text, left);
  if (!c.stop && why.empty() && left > 0) {
    log::warn("meshrun: restarting the worker group on every node (restart %d of %d) after: %s", attempt + 1,
              plan_.opts.max_restarts, c.text.c_str());
    return std::nullopt;
  }
  print_summary(r, attempt);
  if (!why.empty()) log::warn("%s", why.c_str());
  const JobExit e = failed_job_exit(c, local, attempt + 1);
  log::error("%s", e.line.c_str());
  std::fflush(stderr);
  nodes_->leave(attempt);
  return e.code;
}

}  // namespace meshtrain::launch
