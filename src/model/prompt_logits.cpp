// prompt_logits (prompt_logits.h): one forward pass over a prompt in eval mode.
#include "meshtrain/model/prompt_logits.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

at::Tensor prompt_logits(Transformer& model, const std::vector<int64_t>& ids) {
  MT_CHECK(!ids.empty(), "prompt_logits: the prompt must hold at least one token");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto tokens = at::tensor(ids, at::kLong).unsqueeze(0).to(model->tok_embed->weight.device());
  at::Tensor logits = model->forward(tokens)[0].to(at::kFloat).cpu().contiguous();  // [T, V]
  if (was_training) model->train();
  return logits;
}

}  // namespace meshtrain::model
