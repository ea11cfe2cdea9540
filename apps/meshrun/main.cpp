// meshrun: the launcher's command line. All logic lives in src/launch/; this file maps errors to exit codes:
// a user's mistake (bad flag, missing program, port in use) is one line and exit 2.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/launch_options.h"
#include "meshtrain/launch/launch_plan.h"
#include "meshtrain/launch/preflight.h"
#include "meshtrain/launch/slurm_env.h"
#include "meshtrain/launch/supervisor.h"
#include "meshtrain/launch/torchrun_compat.h"

int main(int argc, char** argv) {
  using namespace meshtrain;
  using namespace meshtrain::launch;
  try {
    log::init({});
    LaunchOptions opts = parse_launch_options(std::vector<std::string>(argv + 1, argv + argc));
    if (opts.help) {
      std::fputs(launch_usage().c_str(), stdout);
      return 0;
    }
    if (opts.version) {
      std::puts("meshrun 0.1.0");
      return 0;
    }
    for (const std::string& note : torchrun_compat_notes(opts)) log::warn("%s", note.c_str());
    if (std::string slurm = apply_slurm_env(opts, process_env()); !slurm.empty())
      log::info("meshrun: %s", slurm.c_str());
    LaunchPlan plan = make_launch_plan(opts, self_exe_dir(), visible_gpu_count(),
                                       static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
    validate_config_program(plan);
    if (plan.opts.preflight) {
      if (const int rc = run_preflight(plan, self_exe_dir()); rc != 0) {
        std::fprintf(stderr, "meshrun: --preflight: this node failed a check (meshtrain doctor exit %d); no worker "
                             "started\n", rc);
        return rc;
      }
    }
    int rc = Supervisor(std::move(plan)).run();
    // Every worker is reaped and every file closed: no static destructor has work left, so exit without
    // running them. Only the stdio buffers need flushing.
    std::fflush(nullptr);
    ::_exit(rc);
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshrun: error: %s\n", e.what());
    return 1;
  }
}
