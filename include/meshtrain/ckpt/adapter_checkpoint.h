// AdapterCheckpoint: a checkpoint that holds only a LoRA run's trainable tensors (the adapters and their
// optimizer state) and names the checkpoint its frozen base is read from (docs/lora.md "Checkpoints").
//
// A LoRA run started from checkpoint.init_from rewrites nothing of its base: the base is on disk already, and
// for a 70B model it is 140 GB in bf16 at every checkpoint.every. Its meta.json records the base in
// state["lora"] = {"adapters_only": true, "base": DIR, "id": "crc32c:…", …} (train/lora_base.h), and every
// reader of the model's weights goes through load_with_base: the tensors the checkpoint holds from it, the
// rest from the base — `base_dir` when the caller names one (resume: checkpoint.init_from; export: --base),
// else the recorded path — after checking the base is the one the adapters were trained on (its id).
//
//   ckpt::load_with_base(dir, wanted, cfg.checkpoint.init_from, "checkpoint.init_from");
//   auto params = ckpt::load_full_with_base(dir, "model.", base_flag, "--base");
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

// True when `meta`'s checkpoint holds only adapters and reads its frozen base from another checkpoint.
bool holds_adapters_only(const CheckpointMeta& meta);

// The id of the base a LoRA run adapts, from the base checkpoint's meta.json alone (no weight is read):
// "crc32c:XXXXXXXX" over the names, dtypes and shard checksums of its model tensors (adapters excluded). An
// adapters-only checkpoint's base is its own recorded base, so its id is the one it recorded.
std::string lora_base_id(const CheckpointMeta& base);
// The id of the base `given` names — a checkpoint, a Hugging Face directory or a cached org/name
// (model_path.h; `what` names the key or flag in errors) — so a LoRA run can start from either. A checkpoint's is
// lora_base_id of its meta.json; a Hugging Face directory's "hf-crc32c:XXXXXXXX" over config.json and, for each
// weight file, its header, its size and three 1 KiB samples of every tensor (its first, middle and last bytes):
// a few hundred KB read for any model, where a whole checksum would read every weight. A model trained further
// or edited tensor by tensor differs in the samples; a false "same" would take an edit that avoids all three.
std::string base_id_of(const std::string& given, const std::string& what);

// The directory the base's tensors are in: the recorded base of an adapters-only checkpoint, else `dir`.
std::string lora_base_dir(const std::string& dir, const CheckpointMeta& meta);

// The base (a checkpoint or a Hugging Face directory) that `meta` (at `dir`, adapters only) reads its frozen tensors from: `base_dir` when
// given (`what`: the key or flag that gave it), else the recorded path (`what`: how else to give it, or "").
// UserError, one line: no checkpoint there, or a base of another id.
std::string adapter_base(const std::string& dir, const CheckpointMeta& meta, const std::string& base_dir,
                         const std::string& what);

// load_into (checkpoint_reader.h) that follows an adapters-only checkpoint to its base for the tensors it does
// not hold; a plain checkpoint loads as load_into loads it (`base_dir` unused).
LoadedCheckpoint load_with_base(const std::string& path, std::vector<ShardedTensor>& wanted,
                                const std::string& base_dir = "", const std::string& what = "");
// load_full's model (every tensor named `prefix`…) with an adapters-only checkpoint's base tensors added.
std::map<std::string, at::Tensor> load_full_with_base(const std::string& path, const std::string& prefix,
                                                      const std::string& base_dir, const std::string& what,
                                                      LoadedCheckpoint* info = nullptr);

}  // namespace meshtrain::ckpt
