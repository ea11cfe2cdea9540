// RecoveryReport (recovery_report.h).
#include "meshtrain/train/recovery_report.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "meshtrain/comm/attempt_key.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/worker_env.h"

namespace meshtrain::train {

std::optional<int64_t> last_logged_step(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::optional<int64_t> last;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_object() && rec.contains("loss") && rec.contains("step") && rec["step"].is_number_integer())
      last = std::max(last.value_or(0), rec["step"].get<int64_t>());
  }
  return last;
}

RecoveryReport RecoveryReport::from_environment(const std::string& metrics_path, int64_t resumed_step) {
  RecoveryReport r;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const char* failed_at = std::getenv(launch::kFailureTimeEnv);
  // A restarted attempt, or a regrouped generation of this one (train/in_place_restart.h).
  const bool restarted = (restarts && std::atoi(restarts) >= 1) || comm::generation() >= 1;
  if (!restarted || !failed_at) return r;
  r.in_place_ = comm::generation() >= 1;
  char* end = nullptr;
  const long long ms = std::strtoll(failed_at, &end, 10);
  if (end == failed_at || *end != '\0' || ms <= 0) return r;  // not meshrun's: no report rather than a wrong one
  r.failed_at_ms_ = ms;
  r.resumed_step_ = resumed_step;
  if (!metrics_path.empty()) r.last_logged_step_ = last_logged_step(metrics_path);
  return r;
}

std::string RecoveryReport::at_step(int64_t done, nlohmann::json& rec) {
  if (!failed_at_ms_) return "";
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const double seconds = static_cast<double>(now_ms - *failed_at_ms_) / 1000.0;
  failed_at_ms_.reset();
  rec["recovery_s"] = seconds;
  std::string redone = "steps redone unknown (no metrics before the failure)";
  if (last_logged_step_) {
    const int64_t n = std::max<int64_t>(0, *last_logged_step_ - resumed_step_);
    rec["steps_redone"] = n;
    redone = cat(n, " step(s) redone (the last logged before it was ", *last_logged_step_, ", the checkpoint's ",
                 resumed_step_, ")");
  }
  return cat("recovered from the failure in ", log::sprintf("%.1f s", seconds), in_place_ ? " in place (seen → step " : " (meshrun saw it → step ", done,
             " done); ", redone);
}

}  // namespace meshtrain::train
