#include "meshtrain/launch/worker_group.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/signal_names.h"

namespace meshtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

WorkerGroup::WorkerGroup(const LaunchPlan& plan, int attempt, const std::string& files_root, SignalPipe& sigs,
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

GroupResult WorkerGroup::supervise(const GroupHooks& hooks) {
  GroupResult res;
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

bool WorkerGroup::any_running() const {
  for (const auto& w : workers_)
    if (w.running()) return true;
  return false;
}

}  // namespace meshtrain::launch
