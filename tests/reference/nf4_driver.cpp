// Driver for the NF4 reference test (nf4_test.py): meshtrain's codec (model/nf4_tensor.h), raw files in and out.
//   nf4_driver IN.f32 OUT     little-endian floats → OUT.codes (uint8, two a byte), OUT.absmax_codes (uint8),
//                             OUT.absmax_scales (fp32), OUT.offset (one fp32), OUT.dequant (fp32, IN's length)
//                             OUT.dequant_bf16 (bf16 bits, uint16) and OUT.map (the 256-entry fp32 map)
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/model/nf4_tensor.h"

namespace {

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_USER_CHECK(in, path, ": cannot read");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spill(const std::string& path, const at::Tensor& t) {
  const auto c = t.contiguous();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(c.const_data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  MT_USER_CHECK(out.good(), path, ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    MT_USER_CHECK(argc == 3, "usage: nf4_driver IN.f32 OUT");
    auto in = slurp(argv[1]);
    const auto n = static_cast<int64_t>(in.size() / 4);
    const auto x = at::from_blob(in.data(), {n}, at::kFloat).clone();
    const auto q = meshtrain::model::Nf4Tensor::quantize(x);
    const std::string out = argv[2];
    spill(out + ".codes", q.codes);
    spill(out + ".absmax_codes", q.absmax_codes);
    spill(out + ".absmax_scales", q.absmax_scales);
    spill(out + ".offset", at::tensor({q.absmax_offset}));
    spill(out + ".dequant", q.dequantize(at::kFloat));
    spill(out + ".dequant_bf16", q.dequantize(at::kBFloat16));
    spill(out + ".map", q.absmax_map);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nf4_driver: %s\n", e.what());
    return 2;
  }
}
