#include "meshtrain/ckpt/checkpoint_meta.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
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

// meta.json's fields read by type. Every error is one line naming the file, the field's path
// (`tensors['model.w'].shards[0].file`) and what is valid — never the JSON library's message — so a hand-edited
// or damaged meta.json (`5`, an array, a string format_version) says where it is wrong.
class MetaFields {
 public:
  using json = nlohmann::json;
  using Test = bool (*)(const json&);

  explicit MetaFields(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, const json* v, const std::string& valid) const {
    std::string given = "missing";
    if (v) {
      std::string text = v->dump();
      if (text.size() > 40) text = text.substr(0, 40) + "…";
      given = cat(text, " (", v->is_number() ? "a number" : cat("a", v->is_array() || v->is_object() ? "n " : " ",
                                                                  v->type_name()), ")");
    }
    throw UserError(cat(file_, ": ", path.empty() ? "the document" : path, " is ", given, "; valid ", valid));
  }

  static std::string member(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // `obj`'s member `key` (obj an object, `path` its path), null when absent; present, it must pass `test`.
  const json* optional(const json& obj, const std::string& path, const std::string& key, Test test,
                       const std::string& valid) const {
    const auto it = obj.find(key);
    if (it == obj.end()) return nullptr;
    if (!test(*it)) fail(member(path, key), &*it, valid);
    return &*it;
  }
  const json& required(const json& obj, const std::string& path, const std::string& key, Test test,
                       const std::string& valid) const {
    const json* v = optional(obj, path, key, test, valid);
    if (!v) fail(member(path, key), nullptr, valid);
    return *v;
  }

  int64_t integer(const json& obj, const std::string& path, const std::string& key) const {
    return required(obj, path, key, is_integer, "an integer").get<int64_t>();
  }
  std::string string(const json& obj, const std::string& path, const std::string& key) const {
    return required(obj, path, key, is_string, "a string").get<std::string>();
  }
  std::vector<int64_t> integers(const json& obj, const std::string& path, const std::string& key) const {
    return required(obj, path, key, is_integers, "a list of integers").get<std::vector<int64_t>>();
  }
  json object_or_empty(const json& obj, const std::string& path, const std::string& key) const {
    const json* v = optional(obj, path, key, is_object, "an object");
    return v ? *v : json::object();
  }

  static bool is_integer(const json& v) { return v.is_number_integer(); }
  static bool is_number(const json& v) { return v.is_number(); }
  static bool is_string(const json& v) { return v.is_string(); }
  static bool is_bool(const json& v) { return v.is_boolean(); }
  static bool is_object(const json& v) { return v.is_object(); }
  static bool is_array(const json& v) { return v.is_array(); }
  // A list of data positions {"epoch": E, "cursor": C} (a mixture's sources).
  static bool is_positions(const json& v) {
    if (!v.is_array()) return false;
    for (const json& p : v)
      if (!p.is_object() || !p.contains("epoch") || !p.contains("cursor") || !p["epoch"].is_number_integer() ||
          !p["cursor"].is_number_integer())
        return false;
    return true;
  }
  static bool is_integers(const json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_integer(); });
  }
  static bool is_strings_or_string(const json& v) {
    return v.is_string() ||
           (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); }));
  }

 private:
  std::string file_;
};

// A shard's file is a plain name inside the checkpoint directory, as the writer gives it (rank_00000.safetensors):
// a path (`/etc/passwd`, `../../x`) would read outside the checkpoint.
bool is_plain_file_name(const nlohmann::json& v) {
  if (!v.is_string()) return false;
  const auto& n = v.get_ref<const std::string&>();
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

ShardRecord shard_from(const MetaFields& f, const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) f.fail(path, &j, "an object {\"file\": …, \"byte_range\": …, …}");
  ShardRecord s;
  s.file = f.required(j, path, "file", is_plain_file_name,
                      "a file name inside the checkpoint directory (rank_00000.safetensors): no '/', not '..'")
               .get<std::string>();
  const nlohmann::json& range = f.required(j, path, "byte_range", [](const nlohmann::json& v) {
    return MetaFields::is_integers(v) && v.size() == 2;
  }, "[begin, end], two integers");
  // Read signed, so a negative value is reported as given rather than wrapped around (check_tensor).
  const auto begin = range[0].get<int64_t>(), end = range[1].get<int64_t>();
  MT_USER_CHECK(begin >= 0 && end >= begin, "shard in ", s.file, " has byte_range [", begin, ", ", end,
                ") (valid: 0 ≤ begin ≤ end)");
  s.begin = static_cast<uint64_t>(begin);
  s.end = static_cast<uint64_t>(end);
  s.offsets = f.integers(j, path, "offsets");
  s.shape = f.integers(j, path, "shape");
  s.castagnoli = j.contains("crc32c");
  s.crc = f.required(j, path, s.castagnoli ? "crc32c" : "crc32", [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 0xffffffffLL;
  }, "a CRC-32, an integer in [0, 2^32)").get<uint32_t>();
  return s;
}

// What the rest of meshtrain reads from state and mesh (the trainer's data position, a LoRA run's record, an
// import's source, the layout), checked by type here so no reader meets a value of another type.
void check_state(const MetaFields& f, const nlohmann::json& state, const nlohmann::json& mesh) {
  using F = MetaFields;
  const std::string position = "an object {\"epoch\": …, \"cursor\": …}";
  if (const auto* data = f.optional(state, "state", "data", F::is_object, position)) {
    for (const char* key : {"epoch", "cursor"}) f.optional(*data, "state.data", key, F::is_integer, "an integer");
    f.optional(*data, "state.data", "sources", F::is_positions, "a list of {\"epoch\": …, \"cursor\": …} (a mixture's)");
  }
  if (const auto* lora = f.optional(state, "state", "lora", F::is_object, "an object (the LoRA run's record)")) {
    f.optional(*lora, "state.lora", "rank", F::is_integer, "an integer");
    f.optional(*lora, "state.lora", "alpha", F::is_number, "a number");
    f.optional(*lora, "state.lora", "targets", F::is_strings_or_string, "a list of projections");
    f.optional(*lora, "state.lora", "adapters_only", F::is_bool, "true or false");
    for (const char* key : {"base", "id", "hf_dir"}) f.optional(*lora, "state.lora", key, F::is_string, "a string");
  }
  f.optional(state, "state", "imported_from", F::is_string, "a string (a directory)");
  f.optional(mesh, "mesh", "layout", F::is_string, "a string");
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
  using F = MetaFields;
  const MetaFields f(where);
  if (!j.is_object()) f.fail("", &j, "a JSON object {\"format_version\": 2, \"step\": …, \"tensors\": {…}, …}");
  CheckpointMeta m;
  const nlohmann::json* version = f.optional(j, "", "format_version", F::is_integer, cat("1 or ", kFormatVersion));
  const int64_t given = version ? version->get<int64_t>() : 0;
  MT_USER_CHECK(given == 1 || given == kFormatVersion, where, ": format_version ", given,
                " is not supported (valid: 1, ", kFormatVersion, ")");
  m.version = static_cast<int>(given);
  m.step = f.integer(j, "", "step");
  MT_USER_CHECK(m.step >= 0, where, ": step ", m.step, " is negative (valid: the step saved, ≥ 0; the file was edited "
                "or is damaged)");
  const nlohmann::json* world = f.optional(j, "", "world_size", [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= (1 << 30);
  }, "an integer ≥ 1");
  m.world_size = world ? world->get<int>() : 1;
  m.state = f.object_or_empty(j, "", "state");
  // Version 1 kept the config inside the trainer state.
  m.config = j.contains("config") ? f.object_or_empty(j, "", "config") : f.object_or_empty(m.state, "state", "config");
  m.mesh = f.object_or_empty(j, "", "mesh");
  check_state(f, m.state, m.mesh);
  for (const auto& [name, tj] : f.required(j, "", "tensors", F::is_object, "an object of tensors").items()) {
    const std::string path = cat("tensors['", name, "']");
    if (!tj.is_object()) f.fail(path, &tj, "an object {\"shape\": …, \"dtype\": …, \"shards\": […]}");
    TensorRecord t;
    t.shape = f.integers(tj, path, "shape");
    t.dtype = f.string(tj, path, "dtype");
    const auto& shards = f.required(tj, path, "shards", F::is_array, "a list of shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      try {
        t.shards.push_back(shard_from(f, shards[i], cat(path, ".shards[", i, "]")));
      } catch (const UserError& e) {
        const std::string what = e.what();
        if (what.rfind(where, 0) == 0) throw;  // already names the file and the field
        throw UserError(cat(where, ": tensor '", name, "': ", what));
      }
    }
    check_tensor(where, name, t);
    m.tensors.emplace(name, std::move(t));
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
  const MetaFields f("checkpoint: a rank's shard list");
  RankShards out;
  for (const auto& e : j)
    out.push_back({e.at("name").get<std::string>(), e.at("global_shape").get<std::vector<int64_t>>(),
                   e.at("dtype").get<std::string>(), shard_from(f, e.at("shard"), "shard")});
  return out;
}

std::map<std::string, TensorRecord> merge_shards(const std::vector<RankShards>& per_rank, bool own_blocks_only) {
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
    MT_CHECK(own_blocks_only || covered == numel(t.shape), "checkpoint: the written blocks of '", name, "' cover ", covered, " of ",
             numel(t.shape), " elements: some block has no rank with ShardedTensor::write set");
  }
  return out;
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
