// What a failure cost, said by the run that recovered from it: meshrun tells a restarted attempt's workers when
// it saw the failure (launch/worker_env.h kFailureTimeEnv); the resumed trainer reports at the end of its first
// step the seconds from that moment (the group torn down, restarted, the checkpoint read, one step made; after an
// in-place restart, train/in_place_restart.h, from when this worker saw the failure) and the steps it redid (the
// last step the metrics file logged before the failure, less the step it resumed at), in one log line and in that
// step's metrics record (recovery_s, steps_redone).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace meshtrain::train {

class RecoveryReport {
 public:
  // Armed in a restarted attempt that meshrun told when the failure was seen; `metrics_path` is read before
  // this attempt appends to it (may be empty or missing: steps_redone is then unknown). Rank 0's to make: a
  // default-constructed report says nothing.
  static RecoveryReport from_environment(const std::string& metrics_path, int64_t resumed_step);

  // At the end of step `done`: the first call of an armed report fills `rec` and returns the line to log;
  // "" otherwise.
  std::string at_step(int64_t done, nlohmann::json& rec);

 private:
  std::optional<int64_t> failed_at_ms_;
  std::optional<int64_t> last_logged_step_;
  int64_t resumed_step_ = 0;
  bool in_place_ = false;  // the surviving processes regrouped (comm::generation() > 0) instead of a restart
};

// The largest "step" of a record with a "loss" in a metrics JSONL file (a torn last line ignored); nullopt when
// it holds none or cannot be read.
std::optional<int64_t> last_logged_step(const std::string& metrics_path);

}  // namespace meshtrain::train
