#include "meshtrain/launch/preflight.h"

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/core/spawn_and_wait.h"

namespace meshtrain::launch {

std::vector<std::string> preflight_command(const LaunchPlan& plan, const std::string& self_dir) {
  std::vector<std::string> cmd = {self_dir + "/meshtrain", "doctor"};
  if (plan.kind == ProgramKind::Config) {
    cmd.push_back(plan.command[2]);
    // The run's --set overrides (checkpoint.dir, the model) apply to the doctor's config too.
    for (size_t i = 3; i < plan.command.size(); ++i) {
      const std::string& a = plan.command[i];
      if (a == "--set" && i + 1 < plan.command.size()) cmd.insert(cmd.end(), {"--set", plan.command[++i]});
      else if (a.rfind("--set=", 0) == 0) cmd.push_back(a);
    }
  }
  const bool cpu_run = plan.opts.nproc_per_node == "cpu" || plan.gpu_count == 0;
  if (!cpu_run) cmd.insert(cmd.end(), {"--gpus", std::to_string(plan.nproc_per_node)});
  return cmd;
}

int run_preflight(const LaunchPlan& plan, const std::string& self_dir) {
  const auto cmd = preflight_command(plan, self_dir);
  std::string line;
  for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
  log::info("meshrun: preflight: %s", line.c_str());
  try {
    return spawn_and_wait(cmd);
  } catch (const SpawnError& e) {
    throw UserError(cat("meshrun --preflight: ", e.what()));  // meshtrain missing beside meshrun
  }
}

}  // namespace meshtrain::launch
