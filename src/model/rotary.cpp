// RoPE tables and application. Tables are computed in fp32 and cast to the activation dtype at use.
#include "meshtrain/model/rotary.h"

#include <ATen/ATen.h>

#include <cmath>

namespace meshtrain::model {

at::Tensor rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
  auto idx = at::arange(0, head_dim, 2, at::kDouble);
  auto inv = at::pow(theta, -idx / static_cast<double>(head_dim));
  if (s.factor > 0) {
    // Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between interpolated.
    const double low_wavelen = s.original_max_positions / s.low_freq_factor;
    const double high_wavelen = s.original_max_positions / s.high_freq_factor;
    auto wavelen = 2 * M_PI / inv;
    auto smooth = (s.original_max_positions / wavelen - s.low_freq_factor) /
                  (s.high_freq_factor - s.low_freq_factor);
    auto scaled = (1 - smooth) * inv / s.factor + smooth * inv;
    inv = at::where(wavelen > low_wavelen, inv / s.factor, at::where(wavelen < high_wavelen, inv, scaled));
  }
  return inv.to(at::kFloat);
}

std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& inv_freq, int64_t offset, int64_t T) {
  auto pos = at::arange(offset, offset + T, inv_freq.options());
  auto freqs = at::outer(pos, inv_freq);     // [T, hd/2]
  auto emb = at::cat({freqs, freqs}, -1);     // [T, hd]
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  auto c = cos.to(x.dtype());
  auto s = sin.to(x.dtype());
  return x * c + rotated * s;
}

}  // namespace meshtrain::model
