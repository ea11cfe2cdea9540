// adopt_source_model (source_model.h).
#include "meshtrain/ckpt/source_model.h"

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/ckpt/recorded_config.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/model_shape.h"

namespace meshtrain::ckpt {

std::string adopt_source_model(Config& cfg) {
  const std::string& from = cfg.checkpoint.init_from;
  if (from.empty() || gives_model_shape(cfg.model)) return "";
  const ModelPath located = locate_model(from, "checkpoint.init_from");
  ModelConfig source;
  if (located.hugging_face) {
    source = HfModelDir(located.dir).model();
  } else {
    const std::string dir = resolve_checkpoint_dir(located.dir);
    source = recorded_config(dir, read_meta(dir)).model;
  }
  copy_model_shape(source, cfg.model);
  const ModelConfig& m = cfg.model;
  return cat("model: ", m.family, " shape from checkpoint.init_from ", from, " (", m.n_layer, " layers, d_model ",
             m.d_model, ", vocab ", m.vocab_size, "): the config gives no model shape of its own");
}

}  // namespace meshtrain::ckpt
