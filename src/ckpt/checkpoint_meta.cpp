#include "meshtrain/ckpt/checkpoint_meta.h"

#include <c10/core/ScalarType.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/sharded_tensor.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

nlohmann::json shard_json(const ShardRecord& s) {
  return {{"file", s.file}, {"byte_range", {s.begin, s.end}}, {"offsets", s.offsets}, {"shape", s.shape},
          {s.castagnoli ? "crc32c" : "crc32", s.crc}};
}

ShardRecord shard_from(const nlohmann::json& j) {
  ShardRecord s;
  s.file = j.at("file").get<std::string>();
  // Read signed, so a negative value is reported as given rather than wrapped around (check_tensor).
  const auto begin = j.at("byte_range").at(0).get<int64_t>(), end = j.at("byte_range").at(1).get<int64_t>();
  MT_USER_CHECK(begin >= 0 && end >= begin, "shard in ", s.file, " has byte_range [", begin, ", ", end,
                ") (valid: 0 ≤ begin ≤ end)");
  s.begin = static_cast<uint64_t>(begin);
  s.end = static_cast<uint64_t>(end);
  s.offsets = j.at("offsets").get<std::vector<int64_t>>();
  s.shape = j.at("shape").get<std::vector<int64_t>>();
  s.castagnoli = j.contains("crc32c");
  s.crc = j.at(s.castagnoli ? "crc32c" : "crc32").get<uint32_t>();
  return s;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool overlap(const ShardRecord& a, const ShardRecord& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] >= b.offsets[d] + b.shape[d] || b.offsets[d] >= a.offsets[d] + a.shape[d]) return false;
  }
  return true;
}

// What the reader relies on, checked once here so every later error is about the data, not the metadata:
// a dtype meshtrain reads, shards of the tensor's rank inside the global shape, byte ranges as long as
// their shape and dtype need.
void check_tensor(const std::string& where, const std::string& name, const TensorRecord& t) {
  const auto elem = static_cast<int64_t>(
      c10::elementSize(dtype_from_safetensors(t.dtype, cat(where, ": tensor '", name, "'"))));
  for (int64_t d : t.shape) MT_USER_CHECK(d >= 0, where, ": tensor '", name, "' has shape ", shape_text(t.shape), " (valid: sizes ≥ 0)");
  for (const auto& s : t.shards) {
    MT_USER_CHECK(s.offsets.size() == t.shape.size() && s.shape.size() == t.shape.size(), where, ": tensor '", name,
                  "' has a shard whose rank differs from the tensor's");
    for (size_t d = 0; d < t.shape.size(); ++d)
      MT_USER_CHECK(s.offsets[d] >= 0 && s.shape[d] >= 0 && s.offsets[d] + s.shape[d] <= t.shape[d], where,
                    ": tensor '", name, "': the shard in ", s.file, " at offsets ", shape_text(s.offsets), " with shape ",
                    shape_text(s.shape), " lies outside the global shape ", shape_text(t.shape));
    const auto need = static_cast<uint64_t>(numel(s.shape) * elem);
    MT_USER_CHECK(s.end - s.begin == need, where, ": tensor '", name, "': the shard in ", s.file, " has byte_range [",
                  s.begin, ", ", s.end, ") = ", s.end - s.begin, " bytes, its shape ", shape_text(s.shape), " and dtype ",
                  t.dtype, " need ", need);
  }
}

}  // namespace

nlohmann::json to_json(const CheckpointMeta& m) {
  nlohmann::json j = {{"format_version", m.version}, {"step", m.step},   {"world_size", m.world_size},
                      {"config", m.config},          {"mesh", m.mesh},   {"state", m.state}};
  auto& tj = j["tensors"] = nlohmann::json::object();
  for (const auto& [name, t] : m.tensors) {
    auto shards = nlohmann::json::array();
    for (const auto& s : t.shards) shards.push_back(shard_json(s));
    tj[name] = {{"shape", t.shape}, {"dtype", t.dtype}, {"shards", shards}};
  }
  return j;
}

CheckpointMeta meta_from_json(const nlohmann::json& j, const std::string& where) {
  CheckpointMeta m;
  m.version = j.value("format_version", 0);
  MT_USER_CHECK(m.version == 1 || m.version == kFormatVersion, where, ": format_version ", m.version,
                " is not supported (valid: 1, ", kFormatVersion, ")");
  try {
    m.step = j.at("step").get<int64_t>();
    MT_USER_CHECK(m.step >= 0, where, ": step ", m.step, " is negative (valid: the step saved, ≥ 0; the file was edited "
                  "or is damaged)");
    m.world_size = j.value("world_size", 1);
    m.state = j.value("state", nlohmann::json::object());
    // Version 1 kept the config inside the trainer state.
    m.config = j.contains("config") ? j["config"] : m.state.value("config", nlohmann::json::object());
    m.mesh = j.value("mesh", nlohmann::json::object());
    for (const auto& [name, tj] : j.at("tensors").items()) {
      TensorRecord t;
      t.shape = tj.at("shape").get<std::vector<int64_t>>();
      t.dtype = tj.at("dtype").get<std::string>();
      for (const auto& sj : tj.at("shards")) {
        try {
          t.shards.push_back(shard_from(sj));
        } catch (const UserError& e) {
          throw UserError(cat(where, ": tensor '", name, "': ", e.what()));
        }
      }
      check_tensor(where, name, t);
      m.tensors.emplace(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat(where, ": malformed checkpoint metadata: ", e.what()));
  }
  return m;
}

nlohmann::json rank_shards_to_json(const RankShards& s) {
  auto j = nlohmann::json::array();
  for (const auto& e : s)
    j.push_back({{"name", e.name}, {"global_shape", e.global_shape}, {"dtype", e.dtype}, {"shard", shard_json(e.shard)}});
  return j;
}

RankShards rank_shards_from_json(const nlohmann::json& j) {
  RankShards out;
  for (const auto& e : j)
    out.push_back({e.at("name").get<std::string>(), e.at("global_shape").get<std::vector<int64_t>>(),
                   e.at("dtype").get<std::string>(), shard_from(e.at("shard"))});
  return out;
}

std::map<std::string, TensorRecord> merge_shards(const std::vector<RankShards>& per_rank) {
  std::map<std::string, TensorRecord> out;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& e : per_rank[r]) {
      auto [it, fresh] = out.try_emplace(e.name, TensorRecord{e.global_shape, e.dtype, {}});
      MT_CHECK(it->second.shape == e.global_shape && it->second.dtype == e.dtype, "checkpoint: rank ", r,
               " saves tensor '", e.name, "' with a global shape or dtype other ranks do not use");
      for (size_t d = 0; d < e.global_shape.size(); ++d)
        MT_CHECK(e.shard.offsets[d] >= 0 && e.shard.offsets[d] + e.shard.shape[d] <= e.global_shape[d],
                 "checkpoint: rank ", r, "'s block of '", e.name, "' lies outside the global tensor (dim ", d, ")");
      it->second.shards.push_back(e.shard);
    }
  }
  // Disjoint and covering: a layout that marks two replicas as writers, or none, is a bug in that layout.
  for (auto& [name, t] : out) {
    int64_t covered = 0;
    for (size_t a = 0; a < t.shards.size(); ++a) {
      covered += numel(t.shards[a].shape);
      for (size_t b = a + 1; b < t.shards.size(); ++b)
        MT_CHECK(numel(t.shards[a].shape) == 0 || numel(t.shards[b].shape) == 0 || !overlap(t.shards[a], t.shards[b]),
                 "checkpoint: two ranks write overlapping blocks of '", name, "' (", t.shards[a].file, ", ",
                 t.shards[b].file, "): exactly one replica must set ShardedTensor::write");
    }
    MT_CHECK(covered == numel(t.shape), "checkpoint: the written blocks of '", name, "' cover ", covered, " of ",
             numel(t.shape), " elements: some block has no rank with ShardedTensor::write set");
  }
  return out;
}

std::string resolve_checkpoint_dir(const std::string& path_in) {
  fs::path path = path_in;
  if (fs::exists(path / "latest") && !fs::exists(path / "meta.json")) {
    std::ifstream in(path / "latest");
    std::string name;
    in >> name;
    MT_USER_CHECK(!name.empty(), (path / "latest").string(), ": empty (no complete checkpoint)");
    path /= name;
  }
  const std::string p = path.lexically_normal().string();
  MT_USER_CHECK(p.size() < 4 || (p.compare(p.size() - 4, 4, ".tmp") != 0 && p.compare(p.size() - 5, 5, ".tmp/") != 0),
                p, ": an incomplete checkpoint (.tmp) is never loaded");
  return p;
}

CheckpointMeta read_meta(const std::string& dir) {
  const fs::path meta_path = fs::path(dir) / "meta.json";
  std::ifstream in(meta_path);
  MT_USER_CHECK(in, meta_path.string(), ": no such checkpoint metadata (not a checkpoint directory?)");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw UserError(cat(meta_path.string(), ": corrupt checkpoint metadata: ", e.what()));
  }
  return meta_from_json(j, meta_path.string());
}

}  // namespace meshtrain::ckpt
