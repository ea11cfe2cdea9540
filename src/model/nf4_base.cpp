// The NF4 base of a QLoRA model; see nf4_base.h.
#include "meshtrain/model/nf4_base.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/init.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/nf4_tensor.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

std::vector<std::pair<std::string, LinearImpl*>> nf4_base_linears(TransformerImpl& net) {
  std::vector<std::pair<std::string, LinearImpl*>> out;
  if (!net.blocks) return out;
  for (const auto& item : net.blocks->named_modules("blocks"))
    if (auto* lin = dynamic_cast<LinearImpl*>(item.value().get())) out.emplace_back(item.key() + ".weight", lin);
  return out;
}

std::vector<std::string> nf4_base_weight_names(const ModelConfig& cfg) {
  std::vector<std::string> names;
  if (cfg.base_quant == BaseQuant::none) return names;
  TransformerImpl meta(cfg, at::TensorOptions().device(at::kMeta));  // shapes only: nothing allocated
  for (const auto& [name, lin] : nf4_base_linears(meta)) names.push_back(name);
  return names;
}

void quantize_base(TransformerImpl& net, const at::Device& device, const BaseValues& values) {
  at::NoGradGuard no_grad;
  for (const auto& [name, lin] : nf4_base_linears(net)) {
    if (lin->weight.requires_grad()) continue;
    const at::Tensor w = values(name, lin->weight.sizes());
    MT_CHECK(w.sizes() == lin->weight.sizes(), "quantize_base: ", name, " given ", w.sizes(), ", the weight is ",
             lin->weight.sizes());
    lin->hold_weight_as_nf4(Nf4Tensor::quantize(w.to(device)));
  }
}

at::Tensor seeded_base_weight(const ModelConfig& cfg, const std::string& name, at::IntArrayRef shape,
                              const at::Device& device, int64_t seed) {
  at::Tensor w = at::empty(shape, at::TensorOptions().device(device).dtype(at::kFloat));
  init_parameter_block(cfg, name, shape.vec(), std::vector<int64_t>(shape.size(), 0), w, seed);
  return w;
}

void hold_base_nf4_sizes(TransformerImpl& net) {
  const auto meta = at::TensorOptions().device(at::kMeta);
  for (const auto& [name, lin] : nf4_base_linears(net)) {
    if (lin->weight.requires_grad()) continue;
    Nf4Tensor q;
    q.shape = lin->weight.sizes().vec();
    const int64_t n = lin->weight.numel(), blocks = (n + Nf4Tensor::kBlock - 1) / Nf4Tensor::kBlock;
    q.codes = at::empty({(n + 1) / 2}, meta.dtype(at::kByte));
    q.absmax_codes = at::empty({blocks}, meta.dtype(at::kByte));
    const int64_t scales = (blocks + Nf4Tensor::kAbsmaxBlock - 1) / Nf4Tensor::kAbsmaxBlock;
    q.absmax_scales = at::empty({scales}, meta.dtype(at::kFloat));
    q.absmax_map = at::empty({256}, meta.dtype(at::kFloat));
    lin->hold_weight_as_nf4(std::move(q));
  }
}

void round_trip_nf4_base(const ModelConfig& cfg, std::map<std::string, at::Tensor>& params) {
  at::NoGradGuard no_grad;
  for (const std::string& name : nf4_base_weight_names(cfg)) {
    const auto it = params.find(name);
    MT_CHECK(it != params.end(), "round_trip_nf4_base: no tensor '", name, "'");
    at::Tensor& w = it->second;
    w = Nf4Tensor::quantize(w).dequantize(at::kFloat).to(w.scalar_type());
  }
}

}  // namespace meshtrain::model
