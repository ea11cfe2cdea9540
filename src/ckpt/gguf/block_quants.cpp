// The legacy block formats (block_quants.h). Compiled with -ffp-contract=off (CMakeLists.txt): a fused
// multiply-add would round differently from ggml's and numpy's separate multiply and add.
#include "meshtrain/ckpt/gguf/block_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/ckpt/gguf/ggml_types.h"

namespace meshtrain::ckpt::gguf {
namespace {

constexpr int kQK = 32;

void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

float inverse_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// The block's value of largest magnitude, sign kept (the first such, as argmax takes).
float signed_absmax(const float* x) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int j = 1; j < kQK; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// Values j and j+16 share byte j: low nibble, high nibble. Fifth bits (if `qh`) go to bit j of a u32.
void pack_nibbles(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
  for (int j = 0; j < kQK; ++j) high |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  if (qh) std::memcpy(qh, &high, 4);
}

// The 32 quants (0..15, or 0..31 with fifth bits) of a block.
void unpack_nibbles(const uint8_t* qs, const uint8_t* qh, int* q) {
  uint32_t high = 0;
  if (qh) std::memcpy(&high, qh, 4);
  for (int j = 0; j < kQK; ++j) {
    const int nib = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    q[j] = nib | (qh ? static_cast<int>(((high >> j) & 1) << 4) : 0);
  }
}

// Q4_0 / Q5_0: d = max / -half, q = trunc(x / d + half + 0.5) clipped to the top quant.
void quantize_symmetric(const float* x, int64_t nb, uint8_t* out, int half, bool fifth) {
  const size_t bytes = fifth ? 22 : 18;
  for (int64_t b = 0; b < nb; ++b, x += kQK, out += bytes) {
    const float d = signed_absmax(x) / static_cast<float>(-half), id = inverse_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j)
      q[j] = static_cast<uint8_t>(std::min(2 * half - 1, static_cast<int>(std::trunc(x[j] * id + (half + 0.5f)))));
    put_half(out, d);
    pack_nibbles(q, out + (fifth ? 6 : 2), fifth ? out + 2 : nullptr);
  }
}

// Q4_1 / Q5_1: d = (max - min) / top, m = min, q = trunc((x - min) / d + 0.5) clipped.
void quantize_affine(const float* x, int64_t nb, uint8_t* out, int top, bool fifth) {
  const size_t bytes = fifth ? 24 : 20;
  for (int64_t b = 0; b < nb; ++b, x += kQK, out += bytes) {
    const float max = *std::max_element(x, x + kQK), min = *std::min_element(x, x + kQK);
    const float d = (max - min) / static_cast<float>(top), id = inverse_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j)
      q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::trunc((x[j] - min) * id + 0.5f)), 0, top));
    put_half(out, d);
    put_half(out + 2, min);
    pack_nibbles(q, out + (fifth ? 8 : 4), fifth ? out + 4 : nullptr);
  }
}

void dequantize_symmetric(const uint8_t* src, int64_t nb, float* out, int half, bool fifth) {
  const size_t bytes = fifth ? 22 : 18;
  int q[kQK];
  for (int64_t b = 0; b < nb; ++b, src += bytes, out += kQK) {
    const float d = get_half(src);
    unpack_nibbles(src + (fifth ? 6 : 2), fifth ? src + 2 : nullptr, q);
    for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(q[j] - half);
  }
}

void dequantize_affine(const uint8_t* src, int64_t nb, float* out, bool fifth) {
  const size_t bytes = fifth ? 24 : 20;
  int q[kQK];
  for (int64_t b = 0; b < nb; ++b, src += bytes, out += kQK) {
    const float d = get_half(src), m = get_half(src + 2);
    unpack_nibbles(src + (fifth ? 8 : 4), fifth ? src + 4 : nullptr, q);
    for (int j = 0; j < kQK; ++j) {
      const float scaled = d * static_cast<float>(q[j]);
      out[j] = scaled + m;
    }
  }
}

}  // namespace

void quantize_q8_0(const float* x, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, x += kQK, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = inverse_or_zero(d);
    put_half(out, d);
    for (int j = 0; j < kQK; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void quantize_q4_0(const float* x, int64_t nb, uint8_t* out) { quantize_symmetric(x, nb, out, 8, false); }
void quantize_q5_0(const float* x, int64_t nb, uint8_t* out) { quantize_symmetric(x, nb, out, 16, true); }
void quantize_q4_1(const float* x, int64_t nb, uint8_t* out) { quantize_affine(x, nb, out, 15, false); }
void quantize_q5_1(const float* x, int64_t nb, uint8_t* out) { quantize_affine(x, nb, out, 31, true); }

void dequantize_q8_0(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, src += 34, out += kQK) {
    const float d = get_half(src);
    for (int j = 0; j < kQK; ++j) out[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
  }
}

void dequantize_q4_0(const uint8_t* src, int64_t nb, float* out) { dequantize_symmetric(src, nb, out, 8, false); }
void dequantize_q5_0(const uint8_t* src, int64_t nb, float* out) { dequantize_symmetric(src, nb, out, 16, true); }
void dequantize_q4_1(const uint8_t* src, int64_t nb, float* out) { dequantize_affine(src, nb, out, false); }
void dequantize_q5_1(const uint8_t* src, int64_t nb, float* out) { dequantize_affine(src, nb, out, true); }

}  // namespace meshtrain::ckpt::gguf
