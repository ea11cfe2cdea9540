// A callback that autograd runs right after it accumulated a leaf parameter's gradient into .grad — the C++
// side of torch's register_post_accumulate_grad_hook. Data parallelism counts buckets down with it and FSDP
// starts its reduce-scatter from it. It runs on the autograd thread of the parameter's device, inside the
// backward pass; one hook per parameter (setting another replaces it).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace meshtrain::parallel {

void set_post_accumulate_hook(const at::Tensor& param, std::function<void()> fn);
void clear_post_accumulate_hook(const at::Tensor& param);

}  // namespace meshtrain::parallel
