// ParamModule: a torch::nn::Module whose parameters can be swapped for other tensors after construction.
//
// A parameter lives in two places: the module's registry (named_parameters(), what optimizers and
// checkpoints see) and a member (`weight`, what forward uses). Materialising a meta-built model, sharding a
// weight for tensor parallelism, or pointing it into an FSDP flat buffer all replace the tensor itself — its
// device, shape or storage — which Tensor::set_data cannot do across devices. replace_parameter updates both
// places at once. Every module of ours that owns parameters derives from this.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <string>

namespace meshtrain::model {

class ParamModule : public torch::nn::Module {
 public:
  // `name` is this module's own parameter ("weight"). `t` gets requires_grad like the parameter it replaces.
  void replace_parameter(const std::string& name, at::Tensor t);
  // Takes `name` out of the registry (named_parameters() no longer lists it) and sets its member to `t`: a
  // parameter this module now holds in another form (LinearImpl::hold_weight_as_nf4).
  void retire_parameter(const std::string& name, at::Tensor t);

 protected:
  // register_parameter + remember `member` so replace_parameter can update it. Returns `t`.
  at::Tensor add_parameter(const std::string& name, at::Tensor t, at::Tensor* member);

 private:
  std::map<std::string, at::Tensor*> members_;
};

// Calls `fn(full_name, current)` for every parameter of every ParamModule under `root` and installs what it
// returns (return `current` to keep it). Full names are those of root.named_parameters().
void replace_parameters(torch::nn::Module& root,
                        const std::function<at::Tensor(const std::string& name, const at::Tensor& current)>& fn);

}  // namespace meshtrain::model
