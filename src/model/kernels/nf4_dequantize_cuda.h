// CUDA launcher of the NF4 dequantization (nf4_dequantize.cu; used by src/model/nf4_tensor.cpp): an
// Nf4Tensor's n values into out (fp32, bf16 or fp16), each NF4[code] · (map[absmax_code] · scale + offset)
// computed in fp32 with the same two products and one add as the ATen path (no fused multiply-add), so
// both give the same bits.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// codes: ceil(n/2) bytes (high nibble first); absmax_codes: ceil(n/64); scales: ceil(n/64/256) fp32;
// map: the 256-entry dynamic map (fp32), all on the device of `stream`.
LaunchError nf4_dequantize(const uint8_t* codes, const uint8_t* absmax_codes, const float* scales, const float* map,
                           float offset, int64_t n, DType out_type, void* out, void* stream);

}  // namespace meshtrain::model::cuda
