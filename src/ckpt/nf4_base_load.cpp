// load_nf4_base; see nf4_base_load.h.
#include "meshtrain/ckpt/nf4_base_load.h"

#include <ATen/ATen.h>

#include <optional>
#include <vector>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/model/nf4_base.h"

namespace meshtrain::ckpt {

int64_t load_nf4_base(model::TransformerImpl& net, const at::Device& device, const std::string& checkpoint) {
  int64_t n = 0;
  // A Hugging Face directory (or org/name) read in place, its headers checked once.
  const ModelPath source = locate_model(checkpoint, "");
  std::optional<HfModelDir> hf;
  if (source.hugging_face) hf.emplace(source.dir);
  model::quantize_base(net, device, [&](const std::string& name, at::IntArrayRef shape) {
    at::Tensor w = at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(device));
    std::vector<ShardedTensor> one{{"model." + name, shape.vec(), std::vector<int64_t>(shape.size(), 0), w, true}};
    if (hf) hf->load(one);
    else load_with_base(source.dir, one);  // an adapters-only checkpoint: from the base it records
    ++n;
    return w;
  });
  return n;
}

}  // namespace meshtrain::ckpt
