// Checks that the files a config names exist, before any worker starts (meshrun, `meshtrain config/train`).
#include "meshtrain/core/config.h"
#include "meshtrain/core/glob.h"

namespace meshtrain {

void check_inputs_exist(const Config& cfg) {
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  if (cfg.data.train != kSyntheticData) expand_glob(cfg.data.train, where + "data.train");
  if (!cfg.data.val.empty()) expand_glob(cfg.data.val, where + "data.val");
}

}  // namespace meshtrain
