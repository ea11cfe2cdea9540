// The local Hugging Face Hub cache, read offline: `org/name` → the snapshot directory its `refs/main` names.
// Nothing is downloaded; a name the cache lacks is the user's mistake, one line naming where it was looked for.
//
//   $HF_HUB_CACHE                          (else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
//                                           ~/.cache/huggingface/hub: the cache's own order)
//     models--org--name/refs/main          the commit hash of the revision `main`
//     models--org--name/snapshots/<hash>/  config.json, *.safetensors, tokenizer.json, … (links into blobs/)
#pragma once

#include <string>

namespace meshtrain::ckpt {

// The Hub cache directory the environment names (above).
std::string hf_hub_cache_dir();

// True for `org/name` as the Hub spells a model id: two parts of letters, digits, '-', '_' and '.', neither
// starting with '.'; never an absolute path or one with more parts.
bool is_hub_model_id(const std::string& s);

// The snapshot directory of `id`'s revision main, or "" where the cache holds none (no refs/main, or a
// snapshot it names that is not there).
std::string find_hub_snapshot(const std::string& id);
// The same, or UserError, one line: `what` (a flag or key, may be empty), the id, and the path looked for.
std::string hub_snapshot(const std::string& id, const std::string& what);

}  // namespace meshtrain::ckpt
