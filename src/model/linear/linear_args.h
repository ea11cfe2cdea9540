// The argument checks every op standing in for at::linear(x, W, b) with a bias makes first (bias_linear,
// fused_linear_gelu): a programming error, not a user's, so MT_CHECK.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

// x: [..., in], weight: [out, in], bias: [out]; `op` names the caller in the message.
inline void check_biased_linear_args(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias) {
  MT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": x ", x.sizes(),
           " does not match weight ", weight.sizes());
  MT_CHECK(bias.defined() && bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias of ", weight.size(0),
           " expected");
}

}  // namespace meshtrain::model
