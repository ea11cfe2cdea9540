// What a model argument names — `meshtrain generate|eval|serve MODEL`, checkpoint.init_from — told apart once:
//
//   a meshtrain checkpoint    a step directory (meta.json) or the directory holding `latest`
//   a Hugging Face directory  config.json + model.safetensors (or the index and its shards) + the tokenizer
//                             files: read in place (hf_model_dir.h)
//   org/name                  where no such path exists: the Hub cache's snapshot of it (hf_hub_cache.h)
//
// A directory that is none of these is the user's mistake, one line listing what was expected; a path that does
// not exist at all stays a checkpoint path, whose readers name the meta.json they did not find.
#pragma once

#include <string>

namespace meshtrain::ckpt {

struct ModelPath {
  std::string dir;            // what to read: the path given, or the Hub snapshot an id names
  bool hugging_face = false;  // a Hugging Face model directory, else a meshtrain checkpoint
};

// `what`: the flag or key that gave `given`, for errors ("checkpoint.init_from"; may be empty).
ModelPath locate_model(const std::string& given, const std::string& what);

// Where a model's files are, quietly, for look-ups that may find nothing (tokenizer files): a Hub id the
// cache holds → its snapshot, anything else → itself.
std::string model_files_dir(const std::string& given);

}  // namespace meshtrain::ckpt
