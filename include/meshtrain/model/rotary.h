// Rotary position embedding (RoPE) with Llama 3's frequency scaling, in the "rotate half" layout that
// Hugging Face's Llama uses (so exported weights need only HF's q/k permutation, done at export).
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

struct RopeScaling {
  double factor = 0.0;  // 0 disables Llama-3 scaling
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
};

// Inverse frequencies [head_dim / 2] for base `theta`, scaled per Llama 3 when scaling.factor > 0.
at::Tensor rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);

// cos/sin tables [T, head_dim] for positions [offset, offset + T).
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& inv_freq, int64_t offset, int64_t T);

// x: [B, H, T, head_dim]; cos/sin: [T, head_dim] → rotated x, same shape and dtype.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace meshtrain::model
