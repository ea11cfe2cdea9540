#include "meshtrain/launch/supervisor.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/cpu_binding.h"
#include "meshtrain/launch/node_coordinator.h"
#include "meshtrain/launch/rendezvous_host.h"
#include "meshtrain/launch/root_cause.h"
#include "meshtrain/launch/signal_forwarder.h"
#include "meshtrain/launch/signal_names.h"
#include "meshtrain/launch/worker_group.h"

namespace meshtrain::launch {
namespace {

// A scratch directory for error files when there is no --log-dir; removed at exit unless logs went there.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/meshrun-XXXXXX";
    MT_CHECK(::mkdtemp(tmpl) != nullptr, "mkdtemp /tmp/meshrun-XXXXXX failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    if (keep_) return;
    try {
      remove_tree(path_);  // core/fs.h: std::filesystem::remove_all is unsafe next to libtorch
    } catch (const std::exception& e) {
      log::warn("meshrun: %s", e.what());
    }
  }
  const std::string& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};


// The CPU binding for this node's workers (cpu_binding.h), with a line when it cannot be applied.
CpuBindingPlan bind_near_gpus(const LaunchPlan& plan) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  // MESHRUN_SYSFS_ROOT: read the topology from a copy of /sys (tests use a fixture tree; a support engineer
  // can replay a user's machine).
  const char* sysfs_root = std::getenv("MESHRUN_SYSFS_ROOT");
  CpuBindingPlan b = plan_cpu_binding(parse_numa_binding(plan.opts.numa_binding), plan.opts.numa_binding,
                                      plan.nproc_per_node, cvd ? std::optional<std::string>(cvd) : std::nullopt,
                                      allowed_cpus(), SysfsTopology(sysfs_root ? sysfs_root : ""));
  // On a node without GPUs the default binding has nothing to do; say so only when it was asked for.
  if (!b.problem.empty() && (plan.gpu_count > 0 || plan.opts.explicitly_set.count("numa-binding")))
    log::warn("%s", b.problem.c_str());
  return b;
}

}  // namespace

int Supervisor::run() {
  SignalPipe sigs(plan_.forwarded_signals);
  std::unique_ptr<RendezvousHost> store;
  if (plan_.host_store) {
    store = std::make_unique<RendezvousHost>(plan_.master_port, plan_.loopback_store, plan_.store_exe);
    plan_.master_port = store->port();
  }
  // Reached before anything is printed: an unreachable master is then the one line the user sees.
  std::unique_ptr<NodeCoordinator> nodes;
  if (plan_.nnodes > 1) {
    // Node 0 reaches its own store over loopback (it listens on every interface).
    nodes = std::make_unique<NodeCoordinator>(
        plan_.host_store ? "127.0.0.1" : plan_.master_addr, plan_.master_port, plan_.nnodes, plan_.node_rank,
        plan_.nproc_per_node,
        std::chrono::milliseconds(static_cast<long long>(plan_.opts.rdzv_timeout * 1000)));
  }
  ScratchDir scratch;
  const std::string files_root = plan_.log_folder.empty() ? scratch.path() : plan_.log_folder;
  const int world = plan_.nnodes * plan_.nproc_per_node;
  log::info("meshrun: %d worker(s) on this node (node %d of %d, world size %d), store %s:%d%s, run id %s",
            plan_.nproc_per_node, plan_.node_rank, plan_.nnodes, world, plan_.master_addr.c_str(),
            plan_.master_port, plan_.host_store ? " (hosted here)" : "", plan_.run_id.c_str());
  if (!plan_.log_folder.empty()) log::info("meshrun: logs under %s", plan_.log_folder.c_str());
  if (plan_.kind != ProgramKind::Config && plan_.gpu_count > 0 && plan_.nproc_per_node > plan_.gpu_count)
    log::warn("meshrun: %d workers but %d GPU(s) on this node: right for a CPU backend (gloo), but NCCL needs "
              "one GPU per worker", plan_.nproc_per_node, plan_.gpu_count);
  const CpuBindingPlan binding = bind_near_gpus(plan_);

  // While waiting for the other nodes, a stop signal ends the wait.
  auto interrupted = [&sigs]() {
    for (int s : sigs.drain())
      if (s != SIGCHLD && is_stop_signal(s)) return s;
    return 0;
  };

  bool wrote_scratch_logs = false;
  for (int attempt = 0;; ++attempt) {
    if (nodes) nodes->join(attempt, interrupted);
    GroupHooks hooks;
    hooks.poll = [&]() -> std::optional<std::string> {
      if (store) {
        if (auto st = store->exited())
          return cat("the rendezvous store (meshrun-store, pid ", store->pid(), ") exited with ",
                     describe_status(*st));
      }
      if (nodes) {
        try {
          if (nodes->failed(attempt)) return cat("another node reported a failure in round ", attempt);
        } catch (const Error& e) {
          return std::string(e.what());
        }
      }
      return std::nullopt;
    };
    auto report = [&](int code, bool stop, const std::string& cause) {
      if (!nodes) return;
      try {
        nodes->report(attempt, code, stop, cause);
      } catch (const Error& e) {
        log::warn("%s", e.what());
      }
    };
    hooks.on_failure = [&](const WorkerFailure& f, int notice) {
      report(exit_code_of(f.wait_status), notice != 0,
             cat("rank ", f.rank, " on node ", plan_.node_rank, " (host ", f.host, ", pid ", f.pid, "): ",
                 describe_status(f.wait_status), notice ? cat(" after ", signal_name(notice)) : std::string()));
    };
    hooks.on_stop_signal = [&](int s) {
      report(128 + s, true, cat("node ", plan_.node_rank, "'s launcher got ", signal_name(s)));
    };

    GroupResult r;
    {
      WorkerGroup group(plan_, attempt, files_root, sigs, wrote_scratch_logs, binding);
      r = group.supervise(hooks);
    }
    if (wrote_scratch_logs) {
      scratch.keep();
      log::info("meshrun: redirected/teed logs are in %s", scratch.path().c_str());
    }
    if (nodes) {
      RoundOutcome out;
      try {
        out = nodes->finish(attempt, interrupted);
      } catch (const Error& e) {
        log::error("%s", e.what());
        if (r.failure) std::fputs(format_root_cause(*r.failure, attempt + 1, world).c_str(), stderr);
        return r.failure ? exit_code_of(r.failure->wait_status) : 1;
      }
      if (!out.failed) {
        nodes->leave(attempt);
        return 0;
      }
      if (!out.stop && attempt < plan_.opts.max_restarts) {
        log::warn("meshrun: restarting the worker group on every node (restart %d of %d) after: %s", attempt + 1,
                  plan_.opts.max_restarts, out.cause.c_str());
        continue;
      }
      if (r.failure) std::fputs(format_root_cause(*r.failure, attempt + 1, world).c_str(), stderr);
      log::error("meshrun: job %s after %d attempt(s): %s; exiting with %d", out.stop ? "stopped" : "FAILED",
                 attempt + 1, out.cause.c_str(), out.exit_code);
      std::fflush(stderr);
      nodes->leave(attempt);
      return out.exit_code;
    }
    if (r.stop_signal) {
      if (r.failure) std::fputs(format_root_cause(*r.failure, attempt + 1, world).c_str(), stderr);
      log::warn("meshrun: stopped by %s; exiting with %d", signal_name(r.stop_signal).c_str(),
                128 + r.stop_signal);
      return 128 + r.stop_signal;
    }
    if (!r.outside_stop.empty() && !r.failure) {
      log::error("meshrun: %s; exiting with 1", r.outside_stop.c_str());
      return 1;
    }
    if (!r.failure) return 0;
    if (r.notice_signal) {
      log::warn("meshrun: rank %d exited with %s after %s was forwarded (a preemption notice): no restart; "
                "exiting with %d", r.failure->rank, describe_status(r.failure->wait_status).c_str(),
                signal_name(r.notice_signal).c_str(), exit_code_of(r.failure->wait_status));
      return exit_code_of(r.failure->wait_status);
    }
    if (attempt < plan_.opts.max_restarts) {
      log::warn("meshrun: restarting the worker group (restart %d of %d)", attempt + 1, plan_.opts.max_restarts);
      continue;
    }
    std::fputs(format_root_cause(*r.failure, attempt + 1, world).c_str(), stderr);
    std::fflush(stderr);
    return exit_code_of(r.failure->wait_status);
  }
}

}  // namespace meshtrain::launch
