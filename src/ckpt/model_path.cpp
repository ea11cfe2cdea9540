// locate_model (model_path.h): a checkpoint, a Hugging Face directory or a Hub id.
#include "meshtrain/ckpt/model_path.h"

#include <filesystem>

#include "meshtrain/ckpt/hf_hub_cache.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {

ModelPath locate_model(const std::string& given, const std::string& what) {
  const fs::path p = given;
  if (!fs::exists(p)) {
    if (is_hub_model_id(given)) return {hub_snapshot(given, what), true};
    return {given, false};
  }
  if (!fs::is_directory(p) || fs::exists(p / "meta.json") || fs::exists(p / "latest")) return {given, false};
  if (HfModelDir::holds_hf_model(given)) return {given, true};
  throw UserError(cat(what.empty() ? "" : what + " ", given, ": neither a meshtrain checkpoint (meta.json, or `latest` "
                      "naming a step directory) nor a Hugging Face model directory (config.json and "
                      "model.safetensors or model.safetensors.index.json, the tokenizer files beside them); an "
                      "org/name is looked up in the Hugging Face cache (", hf_hub_cache_dir(), ")"));
}

std::string model_files_dir(const std::string& given) {
  if (given.empty() || fs::exists(given) || !is_hub_model_id(given)) return given;
  const std::string snapshot = find_hub_snapshot(given);
  return snapshot.empty() ? given : snapshot;
}

}  // namespace meshtrain::ckpt
