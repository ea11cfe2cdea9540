#include "meshtrain/launch/supervisor.h"

#include <ftw.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <memory>
#include <optional>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/cpu_binding.h"
#include "meshtrain/launch/log_router.h"
#include "meshtrain/launch/node_coordinator.h"
#include "meshtrain/launch/rendezvous_host.h"
#include "meshtrain/launch/root_cause.h"
#include "meshtrain/launch/signal_forwarder.h"
#include "meshtrain/launch/signal_names.h"
#include "meshtrain/launch/worker_env.h"
#include "meshtrain/launch/worker_process.h"

namespace meshtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

struct AttemptResult {
  std::optional<WorkerFailure> failure;  // first worker failure, if any
  int stop_signal = 0;                   // a stop signal the launcher received, if any
  std::string outside_stop;              // why the workers were stopped from outside (another node, the store)
  // A notice (SIGUSR1/SIGUSR2) forwarded to the workers. Workers that exit after it (the trainer checkpoints
  // and exits 128+SIGUSR1 on Slurm's preemption warning) are not restarted: the job is being preempted.
  int notice_signal = 0;
};

// What an attempt tells the rest of the launcher, and asks it, while it runs (multi-node coordination and
// the store helper's health live outside the attempt).
struct AttemptHooks {
  std::function<std::optional<std::string>()> poll;      // every --monitor-interval: a reason to stop, if any
  std::function<void(const WorkerFailure&, int notice)> on_failure;  // the first local worker failure
  std::function<void(int)> on_stop_signal;               // the first stop signal to the launcher
};

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

class Attempt {
 public:
  Attempt(const LaunchPlan& plan, int attempt, const std::string& files_root, SignalPipe& sigs,
          bool& wrote_scratch_logs, const CpuBindingPlan& binding)
      : plan_(plan), attempt_(attempt), sigs_(sigs) {
    const int n = plan.nproc_per_node;
    const std::string base = files_root + "/attempt_" + std::to_string(attempt);
    const bool have_log_dir = !plan.log_folder.empty();
    for (int lr = 0; lr < n; ++lr) {
      WorkerIdentity id;
      id.local_rank = lr;
      id.local_world_size = n;
      id.group_rank = plan.node_rank;
      id.group_world_size = plan.nnodes;
      id.role = plan.opts.role;
      id.master_addr = plan.master_addr;
      id.master_port = plan.master_port;
      id.restart_count = attempt;
      id.max_restarts = plan.opts.max_restarts;
      id.run_id = plan.run_id;
      id.signals_to_handle = plan.opts.signals_to_handle;
      const std::string dir = base + "/" + std::to_string(id.rank());
      fs::create_directories(dir);
      id.error_file = dir + "/error.json";
      std::error_code ec;
      fs::remove(id.error_file, ec);  // a stale one would be blamed on this attempt
      ids_.push_back(id);
      SpawnSpec spec;
      spec.argv = plan.command;
      spec.env = worker_environment(id);
      spec.cpus = binding.cpus[static_cast<size_t>(lr)];
      workers_.push_back(WorkerProcess::spawn(spec));

      const int redirect = std_streams_mask(plan.opts.redirects, lr, "redirects");
      const int tee = std_streams_mask(plan.opts.tee, lr, "tee");
      const bool shown = rank_shown(plan.opts.local_ranks_filter, lr);
      for (int bit : {1, 2}) {
        StreamRoute r;
        r.rank = id.rank();
        r.is_stderr = bit == 2;
        r.console_fd = (shown && !(redirect & bit)) ? bit : -1;
        if (have_log_dir || ((redirect | tee) & bit)) {
          r.file_path = dir + (bit == 1 ? "/stdout.log" : "/stderr.log");
          if (!have_log_dir) wrote_scratch_logs = true;
        }
        int fd = bit == 1 ? workers_.back().release_stdout() : workers_.back().release_stderr();
        size_t stream = router_.add(fd, r);
        if (bit == 2 && !binding.notes[static_cast<size_t>(lr)].empty())
          router_.note(stream, binding.notes[static_cast<size_t>(lr)]);
      }
    }
  }

  AttemptResult supervise(const AttemptHooks& hooks) {
    AttemptResult res;
    const auto tick = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(plan_.opts.monitor_interval));
    Clock::time_point next_poll = Clock::now() + tick;
    bool stopping = false, killed = false;
    Clock::time_point deadline{};
    const auto grace = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(plan_.opts.shutdown_timeout));
    auto stop_all = [&](int sig) {
      for (auto& w : workers_)
        if (w.running()) w.signal_group(sig);
      if (!stopping) {
        stopping = true;
        deadline = Clock::now() + grace;
      }
    };
    auto kill_all = [&] {
      for (auto& w : workers_)
        if (w.running()) w.signal_group(SIGKILL);
      killed = true;
    };

    while (any_running()) {
      std::vector<int> fds{sigs_.fd()};
      std::vector<size_t> streams{SIZE_MAX};
      router_.poll_fds(fds, streams);
      std::vector<pollfd> pfds;
      for (int fd : fds) pfds.push_back({fd, POLLIN, 0});
      int timeout_ms = static_cast<int>(plan_.opts.monitor_interval * 1000);
      if (stopping && !killed) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        timeout_ms = static_cast<int>(std::max<long long>(0, std::min<long long>(timeout_ms, left)));
      }
      int rc = ::poll(pfds.data(), pfds.size(), std::max(1, timeout_ms));
      if (rc == -1 && errno != EINTR) SYS_CHECK(rc, "poll");

      if (rc > 0 && (pfds[0].revents & POLLIN)) {
        for (int s : sigs_.drain()) {
          if (s == SIGCHLD) continue;  // reaped below
          if (s == SIGINT && res.stop_signal == SIGINT) {
            log::warn("meshrun: second SIGINT, killing every worker now");
            kill_all();
            continue;
          }
          log::warn("meshrun: got %s, forwarding it to %d worker(s)%s", signal_name(s).c_str(),
                    static_cast<int>(workers_.size()), is_stop_signal(s) ? "; no restart" : "");
          if (is_stop_signal(s)) {
            if (!res.stop_signal) {
              res.stop_signal = s;
              if (hooks.on_stop_signal && !res.failure) hooks.on_stop_signal(s);
            }
            stop_all(s);
          } else {
            res.notice_signal = s;
            for (auto& w : workers_)
              if (w.running()) w.signal_group(s);
          }
        }
      }
      for (size_t i = 1; i < pfds.size(); ++i)
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) router_.on_readable(streams[i]);

      for (size_t i = 0; i < workers_.size(); ++i) {
        if (!workers_[i].try_reap()) continue;
        int st = *workers_[i].status();
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (ok || res.failure || res.stop_signal || !res.outside_stop.empty()) continue;
        WorkerFailure f;
        f.rank = ids_[i].rank();
        f.local_rank = ids_[i].local_rank;
        f.host = host_name();
        f.pid = workers_[i].pid();
        f.wait_status = st;
        f.when = std::chrono::system_clock::now();
        f.error_file = ids_[i].error_file;
        res.failure = f;
        log::warn("meshrun: rank %d (pid %d) failed with %s; stopping the other workers", f.rank,
                  static_cast<int>(f.pid), describe_status(st).c_str());
        if (hooks.on_failure) hooks.on_failure(f, res.notice_signal);
        stop_all(SIGTERM);
      }
      if (hooks.poll && !stopping && Clock::now() >= next_poll) {
        next_poll = Clock::now() + tick;
        if (auto why = hooks.poll()) {
          res.outside_stop = *why;
          log::warn("meshrun: %s; stopping this node's workers", why->c_str());
          stop_all(SIGTERM);
        }
      }
      if (stopping && !killed && Clock::now() >= deadline && any_running()) {
        log::warn("meshrun: workers still running %.1fs after the stop signal; sending SIGKILL",
                  plan_.opts.shutdown_timeout);
        kill_all();
      }
    }
    router_.drain_all();
    // Whatever the workers started in their groups and left behind goes too: nothing outlives the attempt.
    for (auto& w : workers_) w.signal_group(SIGKILL);
    if (res.failure) res.failure->stderr_tail = router_.stderr_tail(res.failure->rank);
    return res;
  }

 private:
  bool any_running() const {
    for (const auto& w : workers_)
      if (w.running()) return true;
    return false;
  }

  const LaunchPlan& plan_;
  int attempt_;
  SignalPipe& sigs_;
  std::vector<WorkerIdentity> ids_;
  // Declared after router_? No: workers_ must be destroyed (SIGKILL + reap) before the router closes the
  // pipes they write to, so that no worker ever sees EPIPE from a launcher that is still alive.
  LogRouter router_;
  std::vector<WorkerProcess> workers_;
};

}  // namespace

namespace {

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
    AttemptHooks hooks;
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

    AttemptResult r;
    {
      Attempt a(plan_, attempt, files_root, sigs, wrote_scratch_logs, binding);
      r = a.supervise(hooks);
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
