// LoraBase; see lora_base.h.
#include "meshtrain/train/lora_base.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/trim.h"
#include "meshtrain/model/linear/lora_linear.h"

namespace meshtrain::train {

namespace {

ckpt::CheckpointMeta base_meta(const Config& cfg) {
  return ckpt::read_meta(ckpt::resolve_checkpoint_dir(cfg.checkpoint.init_from));
}

// The projections a LoRA record's "targets" names (a list, or the one string "q,k,v" of earlier checkpoints),
// in the canonical order, as model.lora_targets is written: "q,v".
std::string targets_text(const StringList& names) {
  ModelConfig m;
  m.lora_rank = 1;
  m.lora_targets = names;
  std::vector<LoraTarget> targets = lora_targets(m);
  std::sort(targets.begin(), targets.end());
  std::string out;
  for (LoraTarget t : targets) out += cat(out.empty() ? "" : ",", t);
  return out;
}

std::string saved_targets_text(const std::string& dir, const nlohmann::json& saved) {
  const nlohmann::json& v = saved["targets"];
  StringList names;
  if (v.is_string()) {
    std::stringstream items(v.get<std::string>());
    for (std::string item; std::getline(items, item, ',');) names.push_back(trim_blanks(item));
  } else {
    names = v.get<StringList>();
  }
  try {
    return targets_text(names);
  } catch (const UserError& e) {
    throw UserError(cat(dir, "/meta.json: state.lora.targets: ", e.what()));
  }
}

}  // namespace

std::string lora_base_id(const Config& cfg) {
  return cfg.checkpoint.init_from.empty() ? "seed " + std::to_string(cfg.train.seed)
                                          : ckpt::base_id_of(cfg.checkpoint.init_from, "checkpoint.init_from");
}

bool saves_adapters_only(const Config& cfg) { return cfg.model.lora_rank > 0 && !cfg.checkpoint.init_from.empty(); }

nlohmann::json lora_record(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  nlohmann::json out = {{"rank", m.lora_rank}, {"alpha", m.lora_alpha}, {"targets", m.lora_targets},
                        {"base", cfg.checkpoint.init_from}, {"hf_dir", ""},
                        {"adapters_only", saves_adapters_only(cfg)}};
  if (cfg.checkpoint.init_from.empty()) {
    out["id"] = lora_base_id(cfg);  // the seed the base is drawn from
    return out;
  }
  // A Hugging Face directory is its own: PEFT's adapter_config.json names it.
  const ckpt::ModelPath located = ckpt::locate_model(cfg.checkpoint.init_from, "checkpoint.init_from");
  if (located.hugging_face) {
    // A directory by its absolute path, so generate or serve from another working directory finds it; an
    // org/name as given (the cache resolves it anywhere).
    if (std::filesystem::exists(cfg.checkpoint.init_from))
      out["base"] = std::filesystem::absolute(cfg.checkpoint.init_from).lexically_normal().string();
    out["id"] = ckpt::base_id_of(cfg.checkpoint.init_from, "checkpoint.init_from");
    out["hf_dir"] = std::filesystem::absolute(located.dir).string();
    return out;
  }
  // The base's meta.json, read once for its id and its Hugging Face directory, which PEFT's
  // adapter_config.json names (an adapters-only init_from recorded its own base's).
  const ckpt::CheckpointMeta base = base_meta(cfg);
  out["id"] = ckpt::lora_base_id(base);
  out["hf_dir"] = ckpt::holds_adapters_only(base) ? base.state["lora"].value("hf_dir", std::string())
                                                   : base.state.value("imported_from", std::string());
  return out;
}

void check_lora_checkpoint(const Config& cfg, const std::string& dir, const ckpt::CheckpointMeta& meta) {
  const int64_t rank = cfg.model.lora_rank;
  const bool has = meta.state.contains("lora");
  if (!has) {
    MT_USER_CHECK(rank == 0, dir, ": saved without LoRA adapters, but model.lora_rank is ", rank,
                  "; valid a checkpoint of a LoRA run (checkpoint.init_from starts LoRA from a model's weights)");
    return;
  }
  const auto& saved = meta.state["lora"];
  if (ckpt::holds_adapters_only(meta)) {
    // The frozen base is read from init_from: it must be given, exist and be the base the adapters belong to.
    MT_USER_CHECK(!cfg.checkpoint.init_from.empty(), dir, ": holds only LoRA adapters, read over the base "
                  "checkpoint.init_from names, but checkpoint.init_from is not set; valid checkpoint.init_from: ",
                  saved.value("base", std::string()), " (the base the adapters were trained on)");
    ckpt::adapter_base(dir, meta, cfg.checkpoint.init_from, "checkpoint.init_from");
  }
  const int64_t saved_rank = saved.value("rank", int64_t{0});
  MT_USER_CHECK(rank == saved_rank, dir, ": holds LoRA adapters of rank ", saved_rank, ", but model.lora_rank is ",
                rank, "; valid ", saved_rank, " (meshtrain export of it writes the merged model)");
  // The adapter set and its scale: resuming with fewer targets would drop the others' trained adapters from the
  // next checkpoint, with more would find them missing, and another alpha would rescale what was learnt.
  if (saved.contains("targets")) {
    const std::string want = targets_text(cfg.model.lora_targets), had = saved_targets_text(dir, saved);
    MT_USER_CHECK(want == had, dir, ": holds LoRA adapters on ", had, ", but model.lora_targets is ", want, "; valid ",
                  had, " (the adapters it holds; a run with other targets starts from checkpoint.init_from)");
  }
  if (saved.contains("alpha")) {
    const double had = saved["alpha"].get<double>();
    MT_USER_CHECK(cfg.model.lora_alpha == had, dir, ": holds LoRA adapters trained with lora_alpha ", had,
                  ", but model.lora_alpha is ", cfg.model.lora_alpha, "; valid ", had, " (the scale they were trained "
                  "at)");
  }
  const std::string id = lora_base_id(cfg), saved_id = saved.value("id", std::string());
  MT_USER_CHECK(id == saved_id, dir, ": its LoRA adapters belong to the base '",
                saved.value("base", std::string()), "' (", saved_id, "), but checkpoint.init_from names '",
                cfg.checkpoint.init_from, "' (", id, "); valid the base the adapters were trained on");
}

}  // namespace meshtrain::train
