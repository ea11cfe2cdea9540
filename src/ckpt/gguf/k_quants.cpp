// The K-quant super-blocks (k_quants.h). Compiled with -ffp-contract=off (CMakeLists.txt), as block_quants.cpp.
#include "meshtrain/ckpt/gguf/k_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/ckpt/gguf/ggml_types.h"

namespace meshtrain::ckpt::gguf {
namespace {

constexpr int kQK_K = 256;

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

void store_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Q4_K/Q5_K's 12 bytes of eight 6-bit scales and eight 6-bit minimums:
//   bytes 0-3: scales 0-3 (low 6 bits), high 2 bits: scales 4-7's top bits
//   bytes 4-7: mins 0-3 (low 6 bits), high 2 bits: mins 4-7's top bits
//   bytes 8-11: scales 4-7's low nibble | mins 4-7's low nibble << 4
void unpack_scale_min(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
  }
}

void pack_scale_min(const int* sc, const int* mn, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = static_cast<uint8_t>(sc[j]);
      s[j + 4] = static_cast<uint8_t>(mn[j]);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((mn[j] & 0x0F) << 4));
      s[j - 4] = static_cast<uint8_t>(s[j - 4] | ((sc[j] >> 4) << 6));
      s[j] = static_cast<uint8_t>(s[j] | ((mn[j] >> 4) << 6));
    }
  }
}

// Q4_K/Q5_K: value e of the super-block sits in sub-block e / 32; its quant q ⇒ (d·sc)·q − dmin·m.
void dequantize_scale_min(const uint8_t* head, const int* q, float* out) {
  const float d = half_at(head), dmin = half_at(head + 2);
  int sc[8], mn[8];
  unpack_scale_min(head + 4, sc, mn);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * static_cast<float>(sc[j]), dm = dmin * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l) {
      const float scaled = ds * static_cast<float>(q[32 * j + l]);
      out[32 * j + l] = scaled - dm;
    }
  }
}

// 256 nibbles from 128 bytes: each 64 values take 32 bytes, the first 32 values the low nibbles.
void unpack_q4k_nibbles(const uint8_t* qs, int* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int chunk = e / 64, high = (e / 32) % 2, l = e % 32;
    q[e] = (qs[32 * chunk + l] >> (4 * high)) & 0x0F;
  }
}

}  // namespace

void dequantize_q2_k(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, src += 84, out += kQK_K) {
    const uint8_t *scales = src, *qs = src + 16;
    const float d = half_at(src + 80), dmin = half_at(src + 82);
    for (int e = 0; e < kQK_K; ++e) {
      const int half = e / 128, shift = 2 * ((e / 32) % 4), l = e % 32, s = e / 16;
      const int q = (qs[32 * half + l] >> shift) & 3;
      const float dl = d * static_cast<float>(scales[s] & 0x0F), ml = dmin * static_cast<float>(scales[s] >> 4);
      const float scaled = dl * static_cast<float>(q);
      out[e] = scaled - ml;
    }
  }
}

void dequantize_q3_k(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, src += 110, out += kQK_K) {
    const uint8_t *hmask = src, *qs = src + 32, *sb = src + 96;
    const float d = half_at(src + 108);
    float dl[16];
    for (int i = 0; i < 16; ++i) {  // low nibbles from bytes 0-7, 2-bit tops from bytes 8-11
      const int low = i < 8 ? (sb[i] & 0x0F) : (sb[i - 8] >> 4);
      const int top = (sb[8 + i % 4] >> (2 * (i / 4))) & 3;
      dl[i] = d * static_cast<float>(static_cast<int8_t>(low | (top << 4)) - 32);
    }
    for (int e = 0; e < kQK_K; ++e) {
      const int half = e / 128, shift = 2 * ((e / 32) % 4), l = e % 32;
      const int low = (qs[32 * half + l] >> shift) & 3;
      const int hbit = (hmask[l] >> (e / 32)) & 1;
      out[e] = dl[e / 16] * static_cast<float>(low - ((hbit ^ 1) << 2));
    }
  }
}

void dequantize_q4_k(const uint8_t* src, int64_t nb, float* out) {
  int q[kQK_K];
  for (int64_t b = 0; b < nb; ++b, src += 144, out += kQK_K) {
    unpack_q4k_nibbles(src + 16, q);
    dequantize_scale_min(src, q, out);
  }
}

void dequantize_q5_k(const uint8_t* src, int64_t nb, float* out) {
  int q[kQK_K];
  for (int64_t b = 0; b < nb; ++b, src += 176, out += kQK_K) {
    const uint8_t* qh = src + 16;
    unpack_q4k_nibbles(src + 48, q);
    for (int e = 0; e < kQK_K; ++e) q[e] |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
    dequantize_scale_min(src, q, out);
  }
}

void dequantize_q6_k(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, src += 210, out += kQK_K) {
    const uint8_t *ql = src, *qh = src + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = half_at(src + 208);
    for (int e = 0; e < kQK_K; ++e) {
      const int c = e / 128, r = e % 128;
      const int low = (ql[64 * c + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int top = (qh[32 * c + r % 32] >> (2 * (r / 32))) & 3;
      const float ds = d * static_cast<float>(scales[e / 16]);
      out[e] = ds * static_cast<float>((low | (top << 4)) - 32);
    }
  }
}

void quantize_q4_k(const float* x, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K, out += 144) {
    float scale[8], minv[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {  // each sub-block spans [-minv, -minv + 15·scale]; its minimum at most 0
      const float lo = std::min(0.0f, *std::min_element(x + 32 * j, x + 32 * j + 32));
      const float hi = *std::max_element(x + 32 * j, x + 32 * j + 32);
      scale[j] = std::max(0.0f, hi - lo) / 15.0f;
      minv[j] = -lo;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, minv[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {  // scales rounded up (no value clipped at the top), minimums to nearest
      sc[j] = std::min(63, static_cast<int>(std::ceil(inv_scale * scale[j])));
      mn[j] = std::min(63, static_cast<int>(std::lround(inv_min * minv[j])));
    }
    store_half(out, max_scale / 63.0f);
    store_half(out + 2, max_min / 63.0f);
    pack_scale_min(sc, mn, out + 4);
    const float d = half_at(out), dmin = half_at(out + 2);
    uint8_t L[kQK_K];
    for (int j = 0; j < 8; ++j) {
      const float dq = d * static_cast<float>(sc[j]), dm = dmin * static_cast<float>(mn[j]);
      for (int l = 0; l < 32; ++l) {
        const int v = dq == 0.0f ? 0 : static_cast<int>(std::lround((x[32 * j + l] + dm) / dq));
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0, 15));
      }
    }
    uint8_t* qs = out + 16;
    for (int j = 0; j < kQK_K; j += 64, qs += 32)
      for (int l = 0; l < 32; ++l) qs[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q6_k(const float* x, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K, out += 210) {
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {  // symmetric sub-blocks: quants -31..31
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      scale[j] = amax / 31.0f;
      max_scale = std::max(max_scale, scale[j]);
    }
    const float iscale = max_scale > 0 ? 127.0f / max_scale : 0.0f;
    auto* scales = reinterpret_cast<int8_t*>(out + 192);
    for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(std::min(127, static_cast<int>(std::ceil(iscale * scale[j]))));
    store_half(out + 208, max_scale / 127.0f);
    const float d = half_at(out + 208);
    uint8_t L[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const float dq = d * static_cast<float>(scales[e / 16]);
      const int v = dq == 0.0f ? 0 : static_cast<int>(std::lround(x[e] / dq));
      L[e] = static_cast<uint8_t>(std::clamp(v, -32, 31) + 32);
    }
    uint8_t *ql = out, *qh = out + 128;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace meshtrain::ckpt::gguf
