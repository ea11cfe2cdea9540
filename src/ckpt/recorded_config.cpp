// recorded_config (recorded_config.h): meta.json's config, or the state's where earlier trainers kept it.
#include "meshtrain/ckpt/recorded_config.h"

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {
namespace {

// The current location when it holds anything, else the older one inside the trainer state.
const nlohmann::json& recorded_json(const CheckpointMeta& meta) {
  if (!meta.config.empty() || !meta.state.is_object()) return meta.config;
  const auto it = meta.state.find("config");
  return it != meta.state.end() ? *it : meta.config;
}

}  // namespace

Config recorded_config(const std::string& dir, const CheckpointMeta& meta, const std::vector<std::string>& overrides) {
  const nlohmann::json& config = recorded_json(meta);
  const std::string where = dir + "/meta.json";
  // A config without its model section cannot rebuild the network the weights belong to.
  MT_USER_CHECK(config.is_object() && config.contains("model"), where,
                ": no config recorded (neither \"config\" nor \"state\".\"config\" holds a model section), so the "
                "model is unknown");
  return parse_config(config.dump(), where, /*json=*/true, overrides);
}

}  // namespace meshtrain::ckpt
