// LoraBase; see lora_base.h.
#include "meshtrain/train/lora_base.h"

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/lora_linear.h"

namespace meshtrain::train {

namespace {

ckpt::CheckpointMeta base_meta(const Config& cfg) {
  return ckpt::read_meta(ckpt::resolve_checkpoint_dir(cfg.checkpoint.init_from));
}

}  // namespace

std::string lora_base_id(const Config& cfg) {
  return cfg.checkpoint.init_from.empty() ? "seed " + std::to_string(cfg.train.seed) : ckpt::lora_base_id(base_meta(cfg));
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
  const std::string id = lora_base_id(cfg), saved_id = saved.value("id", std::string());
  MT_USER_CHECK(id == saved_id, dir, ": its LoRA adapters belong to the base '",
                saved.value("base", std::string()), "' (", saved_id, "), but checkpoint.init_from names '",
                cfg.checkpoint.init_from, "' (", id, "); valid the base the adapters were trained on");
}

}  // namespace meshtrain::train
