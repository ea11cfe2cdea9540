// The type table, the float conversions and the dispatch to the block formats (ggml_types.h).
#include "meshtrain/ckpt/gguf/ggml_types.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "meshtrain/ckpt/gguf/block_quants.h"
#include "meshtrain/ckpt/gguf/k_quants.h"
#include "meshtrain/core/error.h"

namespace meshtrain::ckpt::gguf {
namespace {

using enum GgmlType;

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {F32, "F32", 1, 4, true},       {F16, "F16", 1, 2, true},       {BF16, "BF16", 1, 2, true},
    {Q4_0, "Q4_0", 32, 18, true},   {Q4_1, "Q4_1", 32, 20, true},   {Q5_0, "Q5_0", 32, 22, true},
    {Q5_1, "Q5_1", 32, 24, true},   {Q8_0, "Q8_0", 32, 34, true},   {Q2_K, "Q2_K", 256, 84, false},
    {Q3_K, "Q3_K", 256, 110, false}, {Q4_K, "Q4_K", 256, 144, true}, {Q5_K, "Q5_K", 256, 176, false},
    {Q6_K, "Q6_K", 256, 210, true},
};

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

GgmlTypeInfo ggml_type_info(GgmlType t) {
  auto info = ggml_type_info(static_cast<uint32_t>(t));
  MT_CHECK(info, "ggml type ", static_cast<uint32_t>(t), " not in the table");
  return *info;
}

std::string ggml_type_name(uint32_t id) {
  if (auto t = ggml_type_info(id)) return t->name;
  // ggml's other types (ggml.h enum ggml_type), which meshtrain does not read.
  static const std::pair<uint32_t, const char*> kOthers[] = {
      {9, "Q8_1"},   {15, "Q8_K"},    {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},
      {20, "IQ4_NL"}, {21, "IQ3_S"},  {22, "IQ2_S"},   {23, "IQ4_XS"}, {24, "I8"},      {25, "I16"},
      {26, "I32"},   {27, "I64"},     {28, "F64"},     {29, "IQ1_M"},  {34, "TQ1_0"},   {35, "TQ2_0"},
      {39, "MXFP4"}};
  for (const auto& [n, name] : kOthers)
    if (n == id) return name;
  return "unknown";
}

std::string ggml_readable_type_names() {
  std::string s;
  for (const GgmlTypeInfo& t : kGgmlTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

std::optional<GgmlType> ggml_type_named(const std::string& name) {
  std::string up = name;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (up == t.name) return t.type;
  return std::nullopt;
}

uint64_t ggml_bytes(GgmlType t, int64_t numel) {
  const GgmlTypeInfo info = ggml_type_info(t);
  MT_CHECK(numel % info.block == 0, "ggml_bytes: ", numel, " values are not whole ", info.name, " blocks");
  return static_cast<uint64_t>(numel / info.block * info.block_bytes);
}

// Integer rounding to nearest even, so that no compiler's float contraction can change a bit.
uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax < 0x38800000u) {  // below half's smallest normal: a multiple of 2^-24 (or zero)
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (ax >> 13) - (112u << 10);
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // a carry may reach the exponent: still right
  return static_cast<uint16_t>(sign | std::min(h, 0x7c00u));
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);  // exact
    return sign ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t fp32_to_bf16(float f) {
  uint32_t n = float_bits(f);
  if ((n & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((n & 0xffff0000u) | (64u << 16)) >> 16);
  const uint64_t r = (static_cast<uint64_t>(n) + (0x7fffu + ((n >> 16) & 1u))) >> 16;
  return static_cast<uint16_t>(r);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

std::vector<uint8_t> quantize(GgmlType t, const float* x, int64_t n) {
  std::vector<uint8_t> out(ggml_bytes(t, n));
  const int64_t nb = n / ggml_type_info(t).block;
  uint8_t* o = out.data();
  switch (t) {
    case F32: std::memcpy(o, x, static_cast<size_t>(n) * 4); break;
    case F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      break;
    case BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      break;
    case Q8_0: quantize_q8_0(x, nb, o); break;
    case Q4_0: quantize_q4_0(x, nb, o); break;
    case Q4_1: quantize_q4_1(x, nb, o); break;
    case Q5_0: quantize_q5_0(x, nb, o); break;
    case Q5_1: quantize_q5_1(x, nb, o); break;
    case Q4_K: quantize_q4_k(x, nb, o); break;
    case Q6_K: quantize_q6_k(x, nb, o); break;
    default: MT_CHECK(false, "quantize: ", ggml_type_info(t).name, " is read-only here");
  }
  return out;
}

void dequantize(GgmlType t, const uint8_t* src, int64_t n, float* out) {
  const int64_t nb = n / ggml_type_info(t).block;
  switch (t) {
    case F32: std::memcpy(out, src, static_cast<size_t>(n) * 4); break;
    case F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
      }
      break;
    case BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
      }
      break;
    case Q8_0: dequantize_q8_0(src, nb, out); break;
    case Q4_0: dequantize_q4_0(src, nb, out); break;
    case Q4_1: dequantize_q4_1(src, nb, out); break;
    case Q5_0: dequantize_q5_0(src, nb, out); break;
    case Q5_1: dequantize_q5_1(src, nb, out); break;
    case Q2_K: dequantize_q2_k(src, nb, out); break;
    case Q3_K: dequantize_q3_k(src, nb, out); break;
    case Q4_K: dequantize_q4_k(src, nb, out); break;
    case Q5_K: dequantize_q5_k(src, nb, out); break;
    case Q6_K: dequantize_q6_k(src, nb, out); break;
  }
}

}  // namespace meshtrain::ckpt::gguf
