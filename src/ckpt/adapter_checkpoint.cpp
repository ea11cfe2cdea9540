// AdapterCheckpoint; see adapter_checkpoint.h.
#include "meshtrain/ckpt/adapter_checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/core/crc32.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/lora_linear.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {

bool holds_adapters_only(const CheckpointMeta& meta) {
  return meta.state.contains("lora") && meta.state["lora"].value("adapters_only", false);
}

std::string lora_base_id(const CheckpointMeta& base) {
  if (holds_adapters_only(base)) return base.state["lora"].value("id", std::string());
  // Names, dtypes and every shard's checksum, in meta.json's (name) order. A base re-saved by another layout
  // has other shards and so another id: a false "different" is possible, a false "same" is not.
  uint32_t crc = 0;
  for (const auto& [name, rec] : base.tensors) {
    if (name.rfind("model.", 0) != 0 || model::is_lora_parameter(name)) continue;
    crc = crc32c(name.data(), name.size(), crc);
    crc = crc32c(rec.dtype.data(), rec.dtype.size(), crc);
    for (const auto& s : rec.shards) crc = crc32c(&s.crc, sizeof s.crc, crc);
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return std::string("crc32c:") + hex;
}

std::string lora_base_dir(const std::string& dir, const CheckpointMeta& meta) {
  return holds_adapters_only(meta) ? meta.state["lora"].value("base", std::string()) : dir;
}

std::string adapter_base(const std::string& dir, const CheckpointMeta& meta, const std::string& base_dir,
                         const std::string& what) {
  const nlohmann::json& rec = meta.state["lora"];
  const std::string recorded = rec.value("base", std::string()), id = rec.value("id", std::string());
  const std::string given = base_dir.empty() ? recorded : base_dir;
  const std::string from = base_dir.empty() ? "the path recorded in its meta.json" : what;
  const std::string valid = "valid: the base the adapters were trained on ('" + recorded + "', id " + id + ")" +
                            (base_dir.empty() && !what.empty() ? ", or give it with " + what : std::string());
  MT_USER_CHECK(!given.empty() && (fs::exists(fs::path(given) / "meta.json") || fs::exists(fs::path(given) / "latest")),
                dir, ": holds only LoRA adapters, and their base '", given, "' (", from, ") is not a checkpoint; ",
                valid);
  const std::string found = lora_base_id(read_meta(resolve_checkpoint_dir(given)));
  MT_USER_CHECK(found == id, dir, ": its LoRA adapters belong to the base '", recorded, "' (", id, "), but '", given,
                "' (", from, ") is another (", found, "); ", valid);
  return given;
}

LoadedCheckpoint load_with_base(const std::string& path, std::vector<ShardedTensor>& wanted,
                                const std::string& base_dir, const std::string& what) {
  const std::string dir = resolve_checkpoint_dir(path);
  const CheckpointMeta meta = read_meta(dir);
  if (!holds_adapters_only(meta)) return load_into(dir, wanted);
  // Copies of the wanted blocks share their `local` storage: loading a copy fills the caller's tensor.
  std::vector<ShardedTensor> own, base;
  for (const auto& w : wanted) (meta.tensors.count(w.name) ? own : base).push_back(w);
  // The base may itself be an adapters-only checkpoint (a run started from another's adapters): followed on.
  if (!base.empty()) load_with_base(adapter_base(dir, meta, base_dir, what), base);
  return load_into(dir, own);
}

std::map<std::string, at::Tensor> load_full_with_base(const std::string& path, const std::string& prefix,
                                                      const std::string& base_dir, const std::string& what,
                                                      LoadedCheckpoint* info) {
  const std::string dir = resolve_checkpoint_dir(path);
  const CheckpointMeta meta = read_meta(dir);
  auto out = load_full(dir, prefix, info);
  if (!holds_adapters_only(meta)) return out;
  auto base = load_full_with_base(adapter_base(dir, meta, base_dir, what), prefix, "", "");
  for (auto& [name, t] : base)
    if (!model::is_lora_parameter(name) && name.rfind("model.", 0) == 0) out.emplace(name, std::move(t));
  return out;
}

}  // namespace meshtrain::ckpt
