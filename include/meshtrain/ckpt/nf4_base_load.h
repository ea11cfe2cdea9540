// load_nf4_base: QLoRA's NF4 block linears (model.base_quant nf4, model/nf4_base.h) quantized from a
// checkpoint's values (or a Hugging Face directory's, read in place). They are no parameters, so the loads of a model's parameters pass them by: a training
// run reads them from checkpoint.init_from after its init or resume, `meshtrain eval` from the checkpoint it
// evaluates (an adapters-only one: from the base it records). One weight at a time, in fp32 on the device, so
// no more than one weight's values are ever held beside the NF4 ones. Returns how many it quantized.
//
//   ckpt::load_nf4_base(par->module(), device, cfg.checkpoint.init_from);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace meshtrain::model {
class TransformerImpl;
}

namespace meshtrain::ckpt {

int64_t load_nf4_base(model::TransformerImpl& net, const at::Device& device, const std::string& checkpoint);

}  // namespace meshtrain::ckpt
