// A Hugging Face model directory opened in place — config.json, model.safetensors (or the shards that
// model.safetensors.index.json names), the tokenizer files beside them — so that generate, eval, serve and
// checkpoint.init_from read it as they read a meshtrain checkpoint, with no conversion written to disk, and
// `meshtrain import` converts through the same reader.
//
//   const ckpt::HfModelDir hf(dir);       // config.json → ModelConfig; every file's header checked against the
//                                         // family's name table (hf_name_table.h): before any weight is read
//   hf.load(blocks);                      // any rank's blocks ("model."-prefixed, any layout) filled
//
// A block reads only the rows of the HF tensor it covers (one pread range each; Llama's tensors are stored as
// meshtrain's, GPT-2's Conv1D transposed: its rows are meshtrain's columns), so FSDP and TP ranks read their
// share, not the model; dtypes convert on the copy (a bf16 file into fp32 master weights).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

class HfModelDir {
 public:
  // True when `dir` holds a config.json: what sets a Hugging Face directory apart from a checkpoint's.
  static bool holds_hf_model(const std::string& dir);

  // UserError, one line naming the file: config.json missing or of an architecture meshtrain does not model; no
  // safetensors weights; a tensor missing, mis-shaped or unknown.
  explicit HfModelDir(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_file() const { return config_file_; }
  // The model config.json describes (n_kv_head and d_ff filled; not resolved).
  const ModelConfig& model() const { return model_; }
  // The safetensors files holding the weights.
  const std::vector<std::string>& weight_files() const { return files_; }

  // Fills `wanted` ("model." + a meshtrain parameter name, any rectangle of it) from the files. `what` names the
  // key or argument in errors; a parameter the directory lacks (a LoRA adapter, another model's) is an
  // IncompatibleCheckpoint naming it.
  void load(std::vector<ShardedTensor>& wanted, const std::string& what = "") const;

  // Every meshtrain parameter of the model whole ("model."-prefixed, CPU, the file's dtype): what export reads.
  std::map<std::string, at::Tensor> read_model() const;

  // UserError naming `what` where `m` (a run's model section) is not the model config.json describes: the
  // fields the tensors' shapes do not show (heads, RoPE, norm epsilon, tying) as well as those they do.
  void check_model(const ModelConfig& m, const std::string& what) const;

 private:
  struct Located {
    std::string file;
    TensorEntry entry;
  };

  std::string dir_, config_file_;
  ModelConfig model_;
  std::vector<std::string> files_;
  std::map<std::string, Located> tensors_;  // table name (hf_table_name) → where its bytes are
};

}  // namespace meshtrain::ckpt
