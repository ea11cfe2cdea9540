// Driver for the GGUF block-format reference test (gguf_quants_test.py): meshtrain's side, raw files in and out.
//   gguf_quant_driver quantize TYPE IN.f32 OUT.bin     little-endian floats → TYPE's blocks (ckpt/gguf/ggml_types.h)
//   gguf_quant_driver dequantize TYPE IN.bin OUT.f32   TYPE's blocks → floats
//   gguf_quant_driver fp16 IN.f32 OUT.bin              the fp16 conversion alone (round to nearest even)
// TYPE as ggml spells it (Q4_K, q8_0, …).
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "meshtrain/ckpt/gguf/ggml_types.h"
#include "meshtrain/core/error.h"

namespace g = meshtrain::ckpt::gguf;

namespace {

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_USER_CHECK(in, path, ": cannot read");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spill(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  MT_USER_CHECK(out.good(), path, ": cannot write");
}

g::GgmlType type_named(const std::string& name) {
  const auto t = g::ggml_type_named(name);
  MT_USER_CHECK(t, "unknown type ", name, " (valid: ", g::ggml_readable_type_names(), ")");
  return *t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() == 3 && a[0] == "fp16") {
      const auto in = slurp(a[1]);
      std::vector<uint16_t> out(in.size() / 4);
      for (size_t i = 0; i < out.size(); ++i) out[i] = g::fp32_to_fp16(reinterpret_cast<const float*>(in.data())[i]);
      spill(a[2], out.data(), out.size() * 2);
      return 0;
    }
    MT_USER_CHECK(a.size() == 4 && (a[0] == "quantize" || a[0] == "dequantize"),
                  "usage: gguf_quant_driver quantize|dequantize TYPE IN OUT, or fp16 IN OUT");
    const g::GgmlType t = type_named(a[1]);
    const auto in = slurp(a[2]);
    const g::GgmlTypeInfo info = g::ggml_type_info(t);
    if (a[0] == "quantize") {
      const auto n = static_cast<int64_t>(in.size() / 4);
      const auto out = g::quantize(t, reinterpret_cast<const float*>(in.data()), n);
      spill(a[3], out.data(), out.size());
    } else {
      const int64_t n = static_cast<int64_t>(in.size()) / info.block_bytes * info.block;
      std::vector<float> out(static_cast<size_t>(n));
      g::dequantize(t, reinterpret_cast<const uint8_t*>(in.data()), n, out.data());
      spill(a[3], out.data(), out.size() * 4);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
