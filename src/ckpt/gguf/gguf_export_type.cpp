// The per-tensor type rule of GGUF export (gguf_export_type.h).
#include "meshtrain/ckpt/gguf/gguf_export_type.h"

#include "meshtrain/core/error.h"

namespace meshtrain::ckpt::gguf {
namespace {

const ExportType kExportTypes[] = {{"f32", 0, GgmlType::F32},   {"f16", 1, GgmlType::F16},
                                   {"bf16", 32, GgmlType::BF16}, {"q8_0", 7, GgmlType::Q8_0},
                                   {"q4_0", 2, GgmlType::Q4_0},  {"q4_k_m", 15, GgmlType::Q4_K}};

// llama.cpp's use_more_bits (llama-quant.cpp).
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama-quantize's replacement for a type whose blocks do not tile a row of `row` values.
GgmlType fit_row(GgmlType t, int64_t row) {
  const int64_t block = ggml_type_info(t).block;
  if (row % block == 0) return t;
  if (t == GgmlType::Q4_K) return fit_row(GgmlType::Q5_0, row);
  if (t == GgmlType::Q6_K) return fit_row(GgmlType::Q8_0, row);
  return GgmlType::F16;
}

}  // namespace

ExportType export_type(const std::string& name) {
  std::string valid;
  for (const ExportType& e : kExportTypes) {
    if (e.name == name) return e;
    valid += (valid.empty() ? "" : ", ") + e.name;
  }
  throw UserError(cat("--type: given '", name, "'; valid: ", valid));
}

GgmlType tensor_type(const ExportType& e, const LlamaTensorName& t, int64_t n_layer, bool tied) {
  if (t.shape.size() == 1) return GgmlType::F32;
  const bool head = t.gguf == "output.weight" || (tied && t.gguf == "token_embd.weight");
  GgmlType type = e.base;
  if (e.name == "q4_0" || e.name == "q4_k_m") {
    if (head) type = GgmlType::Q6_K;
    const bool more = t.gguf.ends_with("attn_v.weight") || t.gguf.ends_with("ffn_down.weight");
    if (e.name == "q4_k_m" && more && use_more_bits(t.layer, n_layer)) type = GgmlType::Q6_K;
  }
  return fit_row(type, t.shape.back());
}

}  // namespace meshtrain::ckpt::gguf
