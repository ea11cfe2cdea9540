// nf4_linear: x·Wᵀ + b with W held in NF4 (model/nf4_tensor.h), QLoRA's frozen base (docs/lora.md "QLoRA").
// Forward dequantizes W into the compute dtype (autocast's where it is on for x's device, else x's dtype)
// and runs the GEMM; backward dequantizes it again for ∂x = ∂y·W. W and b are frozen: no weight or bias
// gradient, and nothing of W is kept between the two (the dequantized copy lives for one GEMM), so the
// step holds 0.52 bytes a base parameter, not the 2 of a bf16 copy per layer saved for backward.
//
//   y = nf4_linear(x, q, bias);   // x: [..., in], q: [out, in], bias: [out] or undefined → [..., out]
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

struct Nf4Tensor;

at::Tensor nf4_linear(const at::Tensor& x, const Nf4Tensor& w, const at::Tensor& bias);

}  // namespace meshtrain::model
