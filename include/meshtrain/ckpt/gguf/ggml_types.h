// ggml's tensor types as GGUF files number them, their block sizes, and the one entry point that turns a row
// of floats into a type's bytes (quantize) and back (dequantize). The block formats themselves live in
// block_quants.h (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks of 32) and k_quants.h (Q2_K … Q6_K: super-blocks of
// 256); F16 and BF16 round to nearest even as ggml and the `gguf` Python package do.
//
// Reads every type llama.cpp's `gguf` package dequantizes among F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; writes F32, F16, BF16, the five legacy block types, Q4_K and Q6_K.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::ckpt::gguf {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12,
  Q5_K = 13, Q6_K = 14, BF16 = 30
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;     // "Q4_K", as ggml and the gguf package spell it
  int64_t block;        // values per block
  int64_t block_bytes;  // bytes per block
  bool writes;          // quantize() supports it
};

// The type numbered `id` in a file, or nullopt for one meshtrain does not read (IQ*, TQ*, Q8_1, …).
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);
GgmlTypeInfo ggml_type_info(GgmlType t);
// The name of any type ggml numbers ("IQ4_NL" for 20), read or not, or "unknown": for error messages.
std::string ggml_type_name(uint32_t id);
// "F32, F16, …": the types meshtrain reads, for error messages.
std::string ggml_readable_type_names();
// The type named `name` (case-insensitive: "q8_0"), or nullopt.
std::optional<GgmlType> ggml_type_named(const std::string& name);

// Bytes of a tensor of `numel` values (a multiple of the block; MT_CHECK).
uint64_t ggml_bytes(GgmlType t, int64_t numel);

// `n` floats (a multiple of the type's block) as the type's bytes; the type must be one that writes.
std::vector<uint8_t> quantize(GgmlType t, const float* x, int64_t n);
// `n` values of type `t` from `src` (ggml_bytes(t, n) bytes) into `out`.
void dequantize(GgmlType t, const uint8_t* src, int64_t n, float* out);

// IEEE half and bfloat16 ↔ float, round to nearest even (bfloat16: NaN kept quiet, as ggml).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace meshtrain::ckpt::gguf
