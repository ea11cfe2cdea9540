#include "meshtrain/parallel/post_accumulate_hook.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace meshtrain::parallel {
namespace {

class Hook : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit Hook(std::function<void()> fn) : fn_(std::move(fn)) {}
  void operator()(const torch::autograd::Variable&) override { fn_(); }

 private:
  std::function<void()> fn_;
};

}  // namespace

void set_post_accumulate_hook(const at::Tensor& param, std::function<void()> fn) {
  torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<Hook>(std::move(fn)));
}

void clear_post_accumulate_hook(const at::Tensor& param) {
  torch::autograd::impl::post_acc_grad_hooks(param).reset();
}

}  // namespace meshtrain::parallel
