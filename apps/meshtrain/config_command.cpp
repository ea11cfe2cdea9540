// meshtrain config CONFIG [--set k=v]… | --docs: the resolved config, or the config reference.
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/world_info.h"

namespace meshtrain::cli {

int cmd_config(int argc, char** argv) {
  cxxopts::Options o("meshtrain config", "Print the resolved config (every key, defaults filled in).");
  o.add_options()("set", "override a config value: section.key=value (repeatable)",
                  cxxopts::value<std::vector<std::string>>())("docs", "print the config reference in Markdown")(
      "world-size", "validate for this many ranks (default: WORLD_SIZE or 1)", cxxopts::value<int>())(
      "json", "print JSON instead of YAML")(
      "check", "only check the config (the rules, the inputs, a model shape taken from checkpoint.init_from): "
      "print nothing, exit 2 with one line on a mistake")("h,help", "show this help")(
      "config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  if (r.count("docs")) {
    std::cout << config_reference_markdown();
    return 0;
  }
  const int world = r.count("world-size") ? r["world-size"].as<int>() : comm::world_info_from_env().world_size;
  Config cfg = load_resolved(strings(r, "config"), strings(r, "set"), world);
  if (r.count("check")) return 0;
  std::cout << (r.count("json") ? to_json(cfg) + "\n" : to_yaml(cfg));
  return 0;
}

}  // namespace meshtrain::cli
