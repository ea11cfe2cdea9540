// LoRA adapters out of a checkpoint (docs/lora.md): merged into their base weights, for a plain Hugging Face
// model directory (export_hf does this whenever the checkpoint's config has model.lora_rank > 0), or on their
// own in PEFT's layout, loadable with peft.PeftModel.from_pretrained(base, dir):
//   adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout, target_modules (q_proj, …),
//                              base_model_name_or_path (the Hugging Face directory the base was imported from)
//   adapter_model.safetensors  base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in] and
//                              ….lora_B.weight [out, r], fp32
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

// Parameters (meshtrain names, no "model." prefix) with every adapter pair folded into its weight:
// W' = W + lora_alpha / lora_rank · B A, computed in fp32 and kept in W's dtype; the adapters removed. Under
// model.base_quant nf4 every block linear's W is first its NF4 round trip (model/nf4_base.h): the base the
// QLoRA run trained over, not the bf16/fp32 one it was quantized from.
std::map<std::string, at::Tensor> merge_lora(const ModelConfig& m, std::map<std::string, at::Tensor> params);

// Writes the checkpoint's adapters in PEFT's layout into out_dir (created; files through temporary names).
// UserError when the checkpoint holds no adapters (model.lora_rank 0 in its config).
ExportResult export_peft(const std::string& checkpoint, const std::string& out_dir);

}  // namespace meshtrain::ckpt
