#include "meshtrain/train/in_place_restart.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshtrain/comm/attempt_key.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/worker_env.h"
#include "meshtrain/train/stop_signals.h"

namespace meshtrain::train {
InPlaceRestart::InPlaceRestart(const Config& cfg) {
  const auto env = comm::process_env();
  world_ = comm::world_info_from_env(env);
  const auto on = env(launch::kInPlaceRestartEnv);
  enabled_ = world_.world_size > 1 && on && *on == "1" && cfg.checkpoint.resume == "auto";
  max_regroups_ = static_cast<int>(comm::env_int(env, "TORCHELASTIC_MAX_RESTARTS").value_or(0));
  attempt_ = static_cast<int>(comm::env_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0));
  timeout_ = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000));
}

void InPlaceRestart::join_if_replacement() {
  if (!enabled_ || !comm::process_env()(launch::kReplacementEnv)) return;
  regroup("started in place of a killed worker");
}

bool InPlaceRestart::regroup_after(const std::exception& error) {
  if (!enabled_ || dynamic_cast<const UserError*>(&error)) return false;
  if (const int sig = StopSignals::last_received()) {
    // The launcher is stopping this worker (its handler only noted the signal while the run lived): no regroup.
    // The run's handlers are gone, so the signal now does what its sender meant.
    log::warn("this run failed (%s) after %s came: not regrouping", error.what(), strsignal(sig));
    ::raise(sig);
    return false;
  }
  if (comm::generation() >= max_regroups_) {
    log::error("in-place restart: %d of --max-restarts %d done; this worker exits with its error", comm::generation(),
               max_regroups_);
    return false;
  }
  // The recovery report (train/recovery_report.h) counts from here: this worker saw the failure now.
  ::setenv(launch::kFailureTimeEnv, launch::failure_time_value(std::chrono::system_clock::now()).c_str(), 1);
  log::warn("this run failed: %s", error.what());
  regroup(cat("after: ", error.what()));
  return true;
}

void InPlaceRestart::regroup(const std::string& why) {
  try {
    meet(why);
  } catch (const c10::Error& e) {  // the store's own errors, without their C++ stack frames
    throw Error(cat("in-place restart: the rendezvous store failed: ", comm::store_error_text(e), " (", why, ")"));
  }
}

void InPlaceRestart::meet(const std::string& why) {
  const auto t0 = std::chrono::steady_clock::now();
  const comm::StorePtr store = comm::connect_store_from_env(timeout_);
  const std::string base = cat("meshtrain/regroup/attempt", attempt_, "/");
  const int g = static_cast<int>(store->add(cat(base, "rank", world_.rank), 1));
  const std::string gen = cat(base, "gen", g, "/");
  log::warn("in-place restart %d: waiting for every rank to regroup (%s)", g, why.c_str());
  store->set(gen + std::to_string(world_.rank), comm::store_bytes("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_.world_size; ++r) keys.push_back(gen + std::to_string(r));
  try {
    store->wait(keys, timeout_);
  } catch (const std::exception&) {
    std::string missing;
    for (int r = 0; r < world_.world_size; ++r)
      if (!store->check({keys[static_cast<size_t>(r)]})) missing += cat(missing.empty() ? "" : ",", r);
    throw Error(cat("in-place restart ", g, ": rank(s) ", missing, " did not regroup within ", timeout_.count(),
                    " ms (parallel.timeout_s; ", why, ")"));
  }
  comm::set_generation(g);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::warn("in-place restart %d: all %d ranks regrouped in %.2f s; the run resumes in this process",
            g, world_.world_size, s);
}

}  // namespace meshtrain::train
