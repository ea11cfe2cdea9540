// AdapterCheckpoint; see adapter_checkpoint.h.
#include "meshtrain/ckpt/adapter_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/hf_hub_cache.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/ckpt/safetensors.h"
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

namespace {

uint32_t crc_text(const std::string& s, uint32_t crc) { return crc32c(s.data(), s.size(), crc); }

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_USER_CHECK(in, path, ": cannot read");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A safetensors file's header and size, and three 1 KiB samples of every tensor's bytes: its first, middle
// and last (see base_id_of).
uint32_t crc_weight_file(const std::string& path, uint32_t crc) {
  constexpr uint64_t kSample = 1024;
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), sizeof header_len);
  const uint64_t size = fs::file_size(path);
  MT_USER_CHECK(in && sizeof header_len + header_len <= size, path, ": not a safetensors file (header length ",
                header_len, ", file size ", size, ")");
  std::string buf(header_len, '\0');
  in.read(buf.data(), static_cast<std::streamsize>(header_len));
  crc = crc_text(buf, crc32c(&size, sizeof size, crc));
  const SafetensorsReader reader(path);
  for (const auto& [name, e] : reader.entries()) {
    const uint64_t n = std::min(kSample, e.end - e.begin);
    for (uint64_t at : {e.begin, e.begin + (e.end - e.begin - n) / 2, e.end - n}) {
      buf.resize(n);
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(n));
      MT_USER_CHECK(in, path, ": cannot read ", n, " bytes of ", name, " at ", at);
      crc = crc_text(buf, crc);
    }
  }
  return crc;
}

bool names_base(const std::string& given) {
  return fs::exists(fs::path(given) / "meta.json") || fs::exists(fs::path(given) / "latest") ||
         HfModelDir::holds_hf_model(given) || (!fs::exists(given) && is_hub_model_id(given));
}

}  // namespace

std::string base_id_of(const std::string& given, const std::string& what) {
  const ModelPath located = locate_model(given, what);
  if (!located.hugging_face) return lora_base_id(read_meta(resolve_checkpoint_dir(located.dir)));
  const HfModelDir hf(located.dir);
  uint32_t crc = crc_text(read_whole(hf.config_file()), 0);
  for (const std::string& file : hf.weight_files()) crc = crc_weight_file(file, crc);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return std::string("hf-crc32c:") + hex;
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
  MT_USER_CHECK(!given.empty() && names_base(given), dir, ": holds only LoRA adapters, and their base '", given, "' (",
                from, ") is neither a checkpoint nor a Hugging Face model directory; ", valid);
  const std::string found = base_id_of(given, what);
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
  if (!base.empty()) {
    const ModelPath b = locate_model(adapter_base(dir, meta, base_dir, what), what);
    if (b.hugging_face) HfModelDir(b.dir).load(base, what);
    else load_with_base(b.dir, base);
  }
  return load_into(dir, own);
}

std::map<std::string, at::Tensor> load_full_with_base(const std::string& path, const std::string& prefix,
                                                      const std::string& base_dir, const std::string& what,
                                                      LoadedCheckpoint* info) {
  const std::string dir = resolve_checkpoint_dir(path);
  const CheckpointMeta meta = read_meta(dir);
  auto out = load_full(dir, prefix, info);
  if (!holds_adapters_only(meta)) return out;
  const ModelPath b = locate_model(adapter_base(dir, meta, base_dir, what), what);
  auto base = b.hugging_face ? HfModelDir(b.dir).read_model() : load_full_with_base(b.dir, prefix, "", "");
  for (auto& [name, t] : base)
    if (!model::is_lora_parameter(name) && name.rfind("model.", 0) == 0) out.emplace(name, std::move(t));
  return out;
}

}  // namespace meshtrain::ckpt
