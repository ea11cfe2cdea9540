// Rows of an embedding table: what the token embedding's output is, told to the first block's norm so that its
// backward can gather those rows again instead of keeping the output (a [tokens, d_model] fp32 tensor) alive
// through the whole step (model/kernels/fused_add_norm.h fused_norm_pass).
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

struct TableRows {
  at::Tensor table;  // [num, dim]
  at::Tensor ids;    // int64 [...]: the output is at::embedding(table, ids), [..., dim]
};

}  // namespace meshtrain::model
