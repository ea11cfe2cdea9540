// LoraBase; see lora_base.h.
#include "meshtrain/train/lora_base.h"

#include <cstdio>

#include "meshtrain/core/crc32.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/lora_linear.h"

namespace meshtrain::train {

namespace {

ckpt::CheckpointMeta base_meta(const Config& cfg) {
  return ckpt::read_meta(ckpt::resolve_checkpoint_dir(cfg.checkpoint.init_from));
}

std::string id_of(const ckpt::CheckpointMeta& meta) {
  // Names, dtypes and every shard's checksum, in meta.json's (name) order. A base re-saved by another layout
  // has other shards and so another id: a false "different" is possible, a false "same" is not.
  uint32_t crc = 0;
  for (const auto& [name, rec] : meta.tensors) {
    if (name.rfind("model.", 0) != 0 || model::is_lora_parameter(name)) continue;
    crc = crc32c(name.data(), name.size(), crc);
    crc = crc32c(rec.dtype.data(), rec.dtype.size(), crc);
    for (const auto& s : rec.shards) crc = crc32c(&s.crc, sizeof s.crc, crc);
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return std::string("crc32c:") + hex;
}

}  // namespace

std::string lora_base_id(const Config& cfg) {
  return cfg.checkpoint.init_from.empty() ? "seed " + std::to_string(cfg.train.seed) : id_of(base_meta(cfg));
}

nlohmann::json lora_record(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  nlohmann::json out = {{"rank", m.lora_rank}, {"alpha", m.lora_alpha}, {"targets", m.lora_targets},
                        {"base", cfg.checkpoint.init_from}, {"id", lora_base_id(cfg)}, {"hf_dir", ""}};
  // A base imported from Hugging Face: its directory, which PEFT's adapter_config.json names.
  if (!cfg.checkpoint.init_from.empty()) out["hf_dir"] = base_meta(cfg).state.value("imported_from", std::string());
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
  const int64_t saved_rank = saved.value("rank", int64_t{0});
  MT_USER_CHECK(rank == saved_rank, dir, ": holds LoRA adapters of rank ", saved_rank, ", but model.lora_rank is ",
                rank, "; valid ", saved_rank, " (meshtrain export of it writes the merged model)");
  const std::string id = lora_base_id(cfg), saved_id = saved.value("id", std::string());
  MT_USER_CHECK(id == saved_id, dir, ": its LoRA adapters belong to the base '",
                saved.value("base", std::string()), "' (", saved_id, "), but checkpoint.init_from names '",
                cfg.checkpoint.init_from, "' (", id, "); valid the base the adapters were trained on");
}

}  // namespace meshtrain::train
