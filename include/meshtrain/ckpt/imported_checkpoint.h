// What `meshtrain import` writes, whatever it read (a Hugging Face directory: hf_files.h; a GGUF file:
// gguf_files.h): <out>/step_00000000 (the weights as fp32 "model.*" tensors, the config in meta.json, through
// the checkpoint writer's temporary directory and rename), <out>/latest and <out>/config.yaml (the model section
// and checkpoint.init_from = <out>, every other key a commented template: no resolved world size or run paths).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

// `cfg.model` is what the source determines (not resolved); `tensors` meshtrain parameters without the "model."
// prefix, any dtype; `source` the absolute path imported (meta.json's imported_from, config.yaml's header).
// Fills checkpoint, config_yaml, family and tensors of the result.
ImportResult write_imported_checkpoint(Config cfg, const std::map<std::string, at::Tensor>& tensors,
                                       const std::string& out_dir, const std::string& source);

}  // namespace meshtrain::ckpt
