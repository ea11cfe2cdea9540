// meshtrain train CONFIG [--set k=v]… [--overwrite]: one training worker (what meshrun runs for a config).
#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/run_dir.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::cli {

int cmd_train(int argc, char** argv) {
  cxxopts::Options o("meshtrain train", "Train a model from a YAML/JSON config (see docs/config.md).");
  o.add_options()("set", "override a config value: section.key=value (repeatable)",
                  cxxopts::value<std::vector<std::string>>())(
      "overwrite", "start afresh where train.out_dir holds a previous run: remove its checkpoints and metrics "
      "first (train.overwrite=true)")("h,help", "show this help")(
      "config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  const auto world = comm::world_info_from_env();
  std::vector<std::string> sets = strings(r, "set");
  if (r.count("overwrite")) sets.push_back("train.overwrite=true");
  Config cfg = load_resolved(strings(r, "config"), sets, world.world_size);
  check_fresh_start(cfg);  // meshrun checked it before the workers started; a lone `meshtrain train` here
  const auto result = train::run_training(cfg);
  // Stopped by a signal after checkpointing: report it the way the shell would (128 + signal).
  return result.stop_signal ? 128 + result.stop_signal : 0;
}

}  // namespace meshtrain::cli
