// meta.json of a checkpoint directory: what every tensor is (global shape, dtype) and where each of its
// shards lives (file, absolute byte range, offsets and shape inside the global tensor, CRC-32 of the bytes),
// plus the run's config, the mesh layout that wrote it and the trainer's state. One format for every layout:
// a replicated tensor is one shard covering everything; an FSDP/TP tensor is several rectangular blocks.
//
//   {"format_version": 2, "step": 100, "world_size": 4,
//    "config": {...}, "mesh": {...}, "state": {...},
//    "tensors": {"model.tok_embed.weight": {"shape": [256, 64], "dtype": "F32",
//        "shards": [{"file": "rank_00000.safetensors", "byte_range": [b, e], "offsets": [0, 0],
//                    "shape": [64, 64], "crc32c": 123}, ...]}, ...}}
//
// Version 1 (replicated only, written by earlier meshtrain) has the same "tensors" layout with one shard per
// tensor, a CRC-32/IEEE under "crc32" and no "config"/"mesh": it is read by the same code.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meshtrain::ckpt {

inline constexpr int kFormatVersion = 2;

struct ShardRecord {
  std::string file;  // relative to the checkpoint directory
  uint64_t begin = 0, end = 0;  // absolute byte range in `file`
  std::vector<int64_t> offsets, shape;
  uint32_t crc = 0;
  bool castagnoli = true;  // crc is CRC-32C ("crc32c", format 2) or CRC-32/IEEE ("crc32", format 1)
};

struct TensorRecord {
  std::vector<int64_t> shape;  // global
  std::string dtype;           // safetensors name: "F32", "BF16", ...
  std::vector<ShardRecord> shards;
};

struct CheckpointMeta {
  int version = kFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json mesh = nlohmann::json::object();
  nlohmann::json state = nlohmann::json::object();
  std::map<std::string, TensorRecord> tensors;
};

nlohmann::json to_json(const CheckpointMeta& m);
// `where` names the file in errors. Throws UserError on an unsupported version or a malformed entry.
CheckpointMeta meta_from_json(const nlohmann::json& j, const std::string& where);

// Merges the shard lists of every rank (rank order) into tensor records. Every tensor's shards must agree
// on global shape and dtype, be disjoint and cover the whole tensor exactly once — otherwise the layout that
// produced them marked `write` wrongly and the checkpoint could not be loaded: Error before anything is
// committed.
// What one rank wrote: one entry per tensor block in its file.
struct SavedShard {
  std::string name;
  std::vector<int64_t> global_shape;
  std::string dtype;
  ShardRecord shard;
};
using RankShards = std::vector<SavedShard>;
nlohmann::json rank_shards_to_json(const RankShards& s);
RankShards rank_shards_from_json(const nlohmann::json& j);

// `own_blocks_only`: one rank's snapshot (ckpt/host_checkpoints.h), whose blocks need not cover their tensors.
std::map<std::string, TensorRecord> merge_shards(const std::vector<RankShards>& per_rank, bool own_blocks_only = false);

// Reads and parses <dir>/meta.json (dir already resolved: checkpoint_dir.h resolve_checkpoint_dir).
CheckpointMeta read_meta(const std::string& dir);

}  // namespace meshtrain::ckpt
