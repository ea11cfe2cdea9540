#include "meshtrain/launch/worker_group.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/signal_names.h"

namespace meshtrain::launch {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// A worker that exits 128+N (or dies of N) after notice N was forwarded did what was asked of it.
bool is_requested_stop(int wait_status, int notice) {
  if (notice == 0) return false;
  return (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 128 + notice) ||
         (WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == notice);
}

// Exits that our own stop explains: killed by SIGTERM/SIGKILL, or the shell's 128+N for them.
bool stopped_by_us(int wait_status) {
  if (WIFSIGNALED(wait_status)) return WTERMSIG(wait_status) == SIGTERM || WTERMSIG(wait_status) == SIGKILL;
  return WIFEXITED(wait_status) &&
         (WEXITSTATUS(wait_status) == 128 + SIGTERM || WEXITSTATUS(wait_status) == 128 + SIGKILL);
}

// "[rank ${rank}]:"-style template (torchrun's string.Template macros) → this worker's prefix.
std::string line_prefix(const std::string& tmpl, const WorkerIdentity& id) {
  if (tmpl.empty()) return "[rank " + std::to_string(id.rank()) + "]: ";
  const std::pair<std::string, std::string> macros[] = {
      {"role_name", id.role}, {"local_rank", std::to_string(id.local_rank)}, {"rank", std::to_string(id.rank())}};
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    bool done = false;
    for (const auto& [name, value] : macros) {
      for (const std::string& form : {"${" + name + "}", "$" + name}) {
        if (!done && tmpl.compare(i, form.size(), form) == 0) {
          out += value;
          i += form.size() - 1;
          done = true;
        }
      }
    }
    if (!done) out += tmpl[i];
  }
  return out;
}

}  // namespace

WorkerGroup::WorkerGroup(const LaunchPlan& plan, int attempt, const std::string& files_root, SignalPipe& sigs,
                         bool& wrote_scratch_logs, const CpuBindingPlan& binding, int in_place, bool replacing)
    : plan_(plan),
      attempt_(attempt),
      base_(files_root + "/attempt_" + std::to_string(attempt)),
      wrote_scratch_logs_(wrote_scratch_logs),
      binding_(binding),
      in_place_left_(in_place),
      replacing_(replacing),
      sigs_(sigs) {
  for (int lr = 0; lr < plan.nproc_per_node; ++lr) {
    WorkerIdentity id = identity_of(lr);
    spawn(workers_.size(), id, base_ + "/" + std::to_string(id.rank()));
  }
}

WorkerIdentity WorkerGroup::identity_of(int lr) const {
  WorkerIdentity id;
  id.local_rank = lr;
  id.local_world_size = plan_.nproc_per_node;
  id.group_rank = plan_.node_rank;
  id.group_world_size = plan_.nnodes;
  id.role = plan_.opts.role;
  // The workers reach the store through this node's relay (store_relay.h), which adds the job's token.
  id.master_addr = "127.0.0.1";
  id.master_port = plan_.relay_port;
  id.restart_count = attempt_;
  id.max_restarts = plan_.opts.max_restarts;
  id.run_id = plan_.run_id;
  id.signals_to_handle = plan_.opts.signals_to_handle;
  id.virtual_local_rank = plan_.opts.virtual_local_rank;
  id.extra_env = plan_.worker_env;
  if (replacing_) id.extra_env[kReplacementEnv] = "0";
  return id;
}

void WorkerGroup::spawn(size_t slot, WorkerIdentity id, const std::string& dir) {
  const int lr = id.local_rank;
  fs::create_directories(dir);
  id.error_file = dir + "/error.json";
  std::error_code ec;
  fs::remove(id.error_file, ec);  // a stale one would be blamed on this attempt
  SpawnSpec spec;
  spec.argv = plan_.command;
  spec.env = worker_environment(id);
  spec.cpus = binding_.cpus[static_cast<size_t>(lr)];
  if (slot == workers_.size()) {
    ids_.push_back(id);
    workers_.push_back(WorkerProcess::spawn(spec));
  } else {
    ids_[slot] = id;
    workers_[slot] = WorkerProcess::spawn(spec);
  }
  WorkerProcess& w = workers_[slot];

  const bool have_log_dir = !plan_.log_folder.empty();
  const int redirect = std_streams_mask(plan_.opts.redirects, lr, "redirects");
  const int tee = std_streams_mask(plan_.opts.tee, lr, "tee");
  const bool shown = rank_shown(plan_.opts.local_ranks_filter, lr);
  for (int bit : {1, 2}) {
    StreamRoute r;
    r.rank = id.rank();
    r.prefix = line_prefix(plan_.opts.log_line_prefix_template, id);
    r.is_stderr = bit == 2;
    // Tee wins over redirect (torchrun): a teed stream reaches the console even when also redirected.
    r.console_fd = (shown && (!(redirect & bit) || (tee & bit))) ? bit : -1;
    if (have_log_dir || ((redirect | tee) & bit)) {
      r.file_path = dir + (bit == 1 ? "/stdout.log" : "/stderr.log");
      if (!have_log_dir) wrote_scratch_logs_ = true;
    }
    int fd = bit == 1 ? w.release_stdout() : w.release_stderr();
    size_t stream = router_.add(fd, r);
    if (bit == 2 && !binding_.notes[static_cast<size_t>(lr)].empty())
      router_.note(stream, binding_.notes[static_cast<size_t>(lr)]);
  }
}

bool WorkerGroup::replace_in_place(size_t slot, int wait_status) {
  // Only a worker that could not regroup itself: one that exits with a code gave up on regrouping (or never
  // could), and the group restart is the way on.
  if (in_place_left_ <= 0 || !WIFSIGNALED(wait_status) || stopping_ || res_.notice_signal || res_.failure)
    return false;
  --in_place_left_;
  ++replaced_;
  WorkerIdentity id = identity_of(ids_[slot].local_rank);
  id.extra_env[kReplacementEnv] = std::to_string(replaced_);
  id.extra_env[kFailureTimeEnv] = failure_time_value(std::chrono::system_clock::now());
  log::warn("meshrun: rank %d (pid %d) was %s; starting it again alone (in-place restart %d, %d left), the other "
            "workers regroup with it", id.rank(), static_cast<int>(workers_[slot].pid()),
            describe_status(wait_status).c_str(), replaced_, in_place_left_);
  spawn(slot, id, base_ + "/" + std::to_string(id.rank()) + "/replacement_" + std::to_string(replaced_));
  return true;
}

GroupResult WorkerGroup::supervise(const GroupHooks& hooks) {
  hooks_ = &hooks;
  res_ = GroupResult{};
  stopping_ = killed_ = false;
  next_poll_ = Clock::now() + seconds(plan_.opts.monitor_interval);
  while (any_running()) {
    wait_for_events();
    reap();
    on_deadlines();
  }
  router_.drain_all();
  // Whatever the workers started in their groups and left behind goes too: nothing outlives the attempt.
  for (auto& w : workers_) w.signal_group(SIGKILL);
  settle_root_cause();
  hooks_ = nullptr;
  return res_;
}

// Sleeps until a signal, worker output, the monitor tick or the SIGKILL deadline; routes output and signals.
void WorkerGroup::wait_for_events() {
  std::vector<int> fds{sigs_.fd()};
  std::vector<size_t> streams{SIZE_MAX};
  router_.poll_fds(fds, streams);
  std::vector<pollfd> pfds;
  for (int fd : fds) pfds.push_back({fd, POLLIN, 0});
  long long timeout_ms = static_cast<long long>(plan_.opts.monitor_interval * 1000);
  if (stopping_ && !killed_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    timeout_ms = std::max<long long>(0, std::min<long long>(timeout_ms, left));
  }
  int rc = ::poll(pfds.data(), pfds.size(), static_cast<int>(std::max<long long>(1, timeout_ms)));
  if (rc == -1 && errno != EINTR) SYS_CHECK(rc, "poll");
  if (rc <= 0) return;
  if (pfds[0].revents & POLLIN) on_signals();
  for (size_t i = 1; i < pfds.size(); ++i)
    if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) router_.on_readable(streams[i]);
}

void WorkerGroup::on_signals() {
  for (int s : sigs_.drain()) {
    if (s == SIGCHLD) continue;  // reaped in reap()
    if (s == SIGINT && res_.stop_signal == SIGINT) {
      log::warn("meshrun: second SIGINT, killing every worker now");
      kill_all();
      continue;
    }
    log::warn("meshrun: got %s, forwarding it to %d worker(s)%s", signal_name(s).c_str(),
              static_cast<int>(workers_.size()), is_stop_signal(s) ? "; no restart" : "");
    if (!is_stop_signal(s)) {
      res_.notice_signal = s;
      for (auto& w : workers_)
        if (w.running()) w.signal_group(s);
      continue;
    }
    if (!res_.stop_signal) {
      res_.stop_signal = s;
      if (hooks_->on_stop_signal && !res_.failure) hooks_->on_stop_signal(s);
    }
    stop_all(s);
  }
}

WorkerFailure WorkerGroup::failure_of(size_t i, int wait_status) {
  WorkerFailure f;
  f.rank = ids_[i].rank();
  f.local_rank = ids_[i].local_rank;
  f.host = plan_.opts.local_addr.empty() ? host_name() : plan_.opts.local_addr;
  f.pid = workers_[i].pid();
  f.wait_status = wait_status;
  f.when = std::chrono::system_clock::now();
  f.error_file = ids_[i].error_file;
  return f;
}

// Every worker that exited since the last pass. The first failure stops the group; failures seen while it
// stops (other than our own SIGTERM/SIGKILL) stay candidates, because the first worker to exit is not always
// the first to fail: a peer that dies of a broken pipe often exits before the rank that broke it
// (settle_root_cause()).
void WorkerGroup::reap() {
  std::vector<WorkerFailure> failed;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i].try_reap()) continue;
    const int st = *workers_[i].status();
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if (is_requested_stop(st, res_.notice_signal)) {
      log::info("meshrun: rank %d stopped at the requested %s (%s)", ids_[i].rank(),
                signal_name(res_.notice_signal).c_str(), describe_status(st).c_str());
      res_.requested_stop = res_.notice_signal;
      continue;
    }
    if (res_.stop_signal || !res_.outside_stop.empty() || (res_.failure && stopped_by_us(st))) continue;
    if (replace_in_place(i, st)) continue;
    failed.push_back(failure_of(i, st));
  }
  if (failed.empty()) return;
  if (res_.failure) {
    res_.consequences.insert(res_.consequences.end(), failed.begin(), failed.end());
    return;
  }
  res_.failure = failed.front();
  res_.consequences.assign(failed.begin() + 1, failed.end());
  const WorkerFailure& f = *res_.failure;
  log::warn("meshrun: rank %d (pid %d) failed with %s; stopping the other workers", f.rank,
            static_cast<int>(f.pid), describe_status(f.wait_status).c_str());
  if (hooks_->on_failure) hooks_->on_failure(f, res_.notice_signal);
  stop_all(SIGTERM);
}

// Once every worker is gone and its last lines are read: the root cause is the first failure in time among
// the candidates (root_cause.h), the others are its consequences.
void WorkerGroup::settle_root_cause() {
  if (!res_.failure) return;
  std::vector<WorkerFailure> all{*res_.failure};
  all.insert(all.end(), res_.consequences.begin(), res_.consequences.end());
  for (auto& f : all) f.stderr_tail = router_.stderr_tail(f.rank);
  const size_t root = pick_root_cause(all);
  if (root != 0)
    log::warn("meshrun: rank %d failed first (%s); rank %d's failure was a consequence", all[root].rank,
              describe_status(all[root].wait_status).c_str(), all[0].rank);
  res_.failure = all[root];
  all.erase(all.begin() + static_cast<long>(root));
  res_.consequences = std::move(all);
}

// The outside poll (another node, the store helper) every --monitor-interval; SIGKILL past the grace.
void WorkerGroup::on_deadlines() {
  if (hooks_->poll && !stopping_ && Clock::now() >= next_poll_) {
    next_poll_ = Clock::now() + seconds(plan_.opts.monitor_interval);
    if (auto why = hooks_->poll()) {
      res_.outside_stop = *why;
      log::warn("meshrun: %s; stopping this node's workers", why->c_str());
      stop_all(SIGTERM);
    }
  }
  if (stopping_ && !killed_ && Clock::now() >= deadline_ && any_running()) {
    log::warn("meshrun: workers still running %.1fs after the stop signal; sending SIGKILL",
              plan_.opts.shutdown_timeout);
    kill_all();
  }
}

void WorkerGroup::stop_all(int sig) {
  for (auto& w : workers_)
    if (w.running()) w.signal_group(sig);
  if (!stopping_) {
    stopping_ = true;
    deadline_ = Clock::now() + seconds(plan_.opts.shutdown_timeout);
  }
}

void WorkerGroup::kill_all() {
  for (auto& w : workers_)
    if (w.running()) w.signal_group(SIGKILL);
  killed_ = true;
}

bool WorkerGroup::any_running() const {
  for (const auto& w : workers_)
    if (w.running()) return true;
  return false;
}

}  // namespace meshtrain::launch
