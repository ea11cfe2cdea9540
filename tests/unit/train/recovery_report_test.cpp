// RecoveryReport (train/recovery_report.h): armed only by meshrun's restart variables, said once, and the steps
// redone read from the metrics file the failed attempt left (a torn last line ignored).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "meshtrain/launch/worker_env.h"
#include "meshtrain/train/recovery_report.h"

namespace meshtrain::train {
namespace {

std::string metrics_file(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("recovery_report_" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  return path.string();
}

TEST(RecoveryReport, LastLoggedStepSkipsRecordsWithoutALossAndATornLine) {
  const std::string path = metrics_file(
      "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"val_loss\": 4.0}\n{\"step\": 3, \"loss\": 4.5}\n"
      "{\"step\": 9, \"val_loss\": 4.0}\n{\"step\": 4, \"lo");
  EXPECT_EQ(last_logged_step(path), 3);
  EXPECT_EQ(last_logged_step(path + ".absent"), std::nullopt);
  std::filesystem::remove(path);
}

TEST(RecoveryReport, SaysOnceWhatARestartCostAndNothingWithoutMeshrunsVariables) {
  const std::string path = metrics_file("{\"step\": 7, \"loss\": 5.0}\n");
  ::unsetenv(launch::kFailureTimeEnv);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  nlohmann::json rec;
  EXPECT_EQ(RecoveryReport::from_environment(path, 4).at_step(5, rec), "");  // no failure time: not armed
  ::setenv(launch::kFailureTimeEnv, "not a time", 1);
  EXPECT_EQ(RecoveryReport::from_environment(path, 4).at_step(5, rec), "");
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  ::setenv(launch::kFailureTimeEnv,
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count() - 2500).c_str(), 1);
  RecoveryReport r = RecoveryReport::from_environment(path, 4);
  const std::string line = r.at_step(5, rec);
  EXPECT_NE(line.find("3 step(s) redone (the last logged before it was 7, the checkpoint's 4)"), std::string::npos)
      << line;
  EXPECT_EQ(rec["steps_redone"], 3);
  EXPECT_GE(rec["recovery_s"].get<double>(), 2.5);
  nlohmann::json later;
  EXPECT_EQ(r.at_step(6, later), "");  // said once
  EXPECT_TRUE(later.empty());
  ::unsetenv(launch::kFailureTimeEnv);
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace meshtrain::train
