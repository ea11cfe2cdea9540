// The frozen base of a QLoRA model (model.base_quant nf4, docs/lora.md "QLoRA"): which weights are held in
// NF4 — every Linear inside the blocks (q, k, v, o, gate, up, down), adapted or not; the norms, embeddings and
// head stay in the compute dtype, as bitsandbytes' QLoRA leaves them — and their quantization one weight at
// a time, so that no more than one weight's fp32 values exist beside the NF4 ones.
//
//   model::quantize_base(*net, device, [&](const std::string& name, at::IntArrayRef shape) { ... fp32 values });
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::model {

class LinearImpl;
class TransformerImpl;

// The block linears held in NF4 under model.base_quant nf4, with their weights' full names
// ("blocks.0.attn.wq.weight"), in the model's order.
std::vector<std::pair<std::string, LinearImpl*>> nf4_base_linears(TransformerImpl& net);

// The weight names nf4_base_linears gives for a model of `cfg` (none under base_quant none), without a model:
// for code that holds a checkpoint's tensors by name (merging adapters into the dequantized base).
std::vector<std::string> nf4_base_weight_names(const ModelConfig& cfg);

// Each block linear's weight as NF4 on `device`, quantized from `values(name, shape)` (any float dtype and
// device; fp32 values are what a checkpoint or HF import stores). A weight held in NF4 already is
// re-quantized from the new values (a resume reads its base again). Weights that train are left alone.
using BaseValues = std::function<at::Tensor(const std::string& name, at::IntArrayRef shape)>;
void quantize_base(TransformerImpl& net, const at::Device& device, const BaseValues& values);

// A base weight `name` of `shape` as every layout draws it from `seed`: whole, in fp32, on `device` (what
// quantize_base's values give for a seeded base, and what FSDP quantizes into its rows).
at::Tensor seeded_base_weight(const ModelConfig& cfg, const std::string& name, at::IntArrayRef shape,
                              const at::Device& device, int64_t seed);

// Each block linear's weight held in NF4 by its sizes only (meta tensors: nothing allocated, no values): for a
// layout that draws and quantizes each weight itself, one at a time, and keeps only its piece (FSDP:
// parallel/fsdp/fully_shard.h), so that no rank ever holds the whole NF4 base.
void hold_base_nf4_sizes(TransformerImpl& net);

// `params` (name → tensor, no "model." prefix) with every NF4 base weight replaced by its NF4 round trip in
// its own dtype: the base a QLoRA run trained over, which its adapters are merged into.
void round_trip_nf4_base(const ModelConfig& cfg, std::map<std::string, at::Tensor>& params);

}  // namespace meshtrain::model
