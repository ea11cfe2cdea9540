// ggml's legacy block formats, 32 values per block, each block a scale (fp16) and, for the _1 types, a minimum
// (fp16) before the packed quants:
//   Q8_0: d, 32 × int8                                  x = d·q
//   Q4_0: d, 16 bytes of nibbles (value j low, j+16 high) x = d·(q − 8)
//   Q4_1: d, m, 16 bytes of nibbles                     x = d·q + m
//   Q5_0: d, u32 of fifth bits, 16 bytes of nibbles     x = d·(q − 16)
//   Q5_1: d, m, u32 of fifth bits, 16 bytes of nibbles  x = d·q + m
// Quantizing follows ggml's reference code (ggml-quants.c quantize_row_*_ref), which the `gguf` Python package
// reproduces bit for bit; dequantizing computes in float in the package's order of operations.
#pragma once

#include <cstdint>

namespace meshtrain::ckpt::gguf {

// `nb` blocks of 32 values each way.
void quantize_q8_0(const float* x, int64_t nb, uint8_t* out);
void quantize_q4_0(const float* x, int64_t nb, uint8_t* out);
void quantize_q4_1(const float* x, int64_t nb, uint8_t* out);
void quantize_q5_0(const float* x, int64_t nb, uint8_t* out);
void quantize_q5_1(const float* x, int64_t nb, uint8_t* out);

void dequantize_q8_0(const uint8_t* src, int64_t nb, float* out);
void dequantize_q4_0(const uint8_t* src, int64_t nb, float* out);
void dequantize_q4_1(const uint8_t* src, int64_t nb, float* out);
void dequantize_q5_0(const uint8_t* src, int64_t nb, float* out);
void dequantize_q5_1(const uint8_t* src, int64_t nb, float* out);

}  // namespace meshtrain::ckpt::gguf
