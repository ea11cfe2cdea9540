// ggml's K-quants: super-blocks of 256 values cut into sub-blocks with their own 4-, 6- or 8-bit scales, each
// scaled by the super-block's fp16 d (and dmin, for the types with minimums):
//   Q2_K (84 B):  scales[16] (4-bit scale | 4-bit min), qs[64] (2 bits), d, dmin
//   Q3_K (110 B): hmask[32] (third bits), qs[64] (2 bits), scales[12] (16 × 6 bits, offset 32), d
//   Q4_K (144 B): d, dmin, scales[12] (8 × 6-bit scale and min), qs[128] (nibbles: 32 values low, next 32 high)
//   Q5_K (176 B): d, dmin, scales[12], qh[32] (fifth bits), qs[128]
//   Q6_K (210 B): ql[128] (low nibbles), qh[64] (2 high bits), scales[16] (int8), d
// Dequantizing computes in float in the `gguf` Python package's order of operations (its results bit for
// bit). Quantizing (Q4_K, Q6_K: what --type q4_k_m writes) takes each sub-block's range, quantizes the
// sub-block scales to 6 (Q4_K) or 8 (Q6_K) bits against the super-block's scale, and rounds every value against
// its sub-block's quantized scale — simpler than llama.cpp's weighted search (make_qkx2_quants), with an error
// bounded by half a quantization step plus the scales' rounding.
#pragma once

#include <cstdint>

namespace meshtrain::ckpt::gguf {

// `nb` super-blocks of 256 values each way.
void quantize_q4_k(const float* x, int64_t nb, uint8_t* out);
void quantize_q6_k(const float* x, int64_t nb, uint8_t* out);

void dequantize_q2_k(const uint8_t* src, int64_t nb, float* out);
void dequantize_q3_k(const uint8_t* src, int64_t nb, float* out);
void dequantize_q4_k(const uint8_t* src, int64_t nb, float* out);
void dequantize_q5_k(const uint8_t* src, int64_t nb, float* out);
void dequantize_q6_k(const uint8_t* src, int64_t nb, float* out);

}  // namespace meshtrain::ckpt::gguf
