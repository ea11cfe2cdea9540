// meshtrain train CONFIG [--set k=v]…: one training worker (what meshrun runs for a config).
#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::cli {

int cmd_train(int argc, char** argv) {
  cxxopts::Options o("meshtrain train", "Train a model from a YAML/JSON config (see docs/config.md).");
  o.add_options()("set", "override a config value: section.key=value (repeatable)",
                  cxxopts::value<std::vector<std::string>>())("h,help", "show this help")(
      "config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  const auto world = comm::world_info_from_env();
  Config cfg = load_resolved(strings(r, "config"), strings(r, "set"), world.world_size);
  const auto result = train::run_training(cfg);
  // Stopped by a signal after checkpointing: report it the way the shell would (128 + signal).
  return result.stop_signal ? 128 + result.stop_signal : 0;
}

}  // namespace meshtrain::cli
