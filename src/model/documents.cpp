// Document boundaries from positions: a document starts where the position is 0 (and at each row's start).
#include "meshtrain/model/documents.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

at::Tensor block_causal_mask(const at::Tensor& positions) {
  MT_CHECK(positions.dim() == 2, "block_causal_mask: positions [B, T], got ", positions.sizes());
  const int64_t T = positions.size(1);
  // doc: [B, T], the document index of each token within its row (a row's first token always starts one).
  auto starts = positions.eq(0);
  starts.select(1, 0).fill_(true);
  auto doc = starts.to(at::kInt).cumsum(1);
  auto same = doc.unsqueeze(2).eq(doc.unsqueeze(1));                                          // [B, T, T]
  auto causal = at::ones({T, T}, positions.options().dtype(at::kBool)).tril();                // key j ≤ query i
  return same.logical_and(causal).unsqueeze(1);                                                // [B, 1, T, T]
}

Documents documents_from_positions(const at::Tensor& positions) {
  MT_CHECK(positions.dim() == 2, "documents_from_positions: positions [B, T], got ", positions.sizes());
  const auto host = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t B = host.size(0), T = host.size(1);
  const int64_t* p = host.data_ptr<int64_t>();
  std::vector<int32_t> cu;
  int64_t max_len = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (i % T == 0 || p[i] == 0) {
      if (!cu.empty()) max_len = std::max<int64_t>(max_len, i - cu.back());
      cu.push_back(static_cast<int32_t>(i));
    }
  }
  max_len = std::max<int64_t>(max_len, B * T - cu.back());
  cu.push_back(static_cast<int32_t>(B * T));
  Documents d;
  d.positions = positions;
  d.cu_seqlens = at::tensor(cu, at::kInt).to(positions.device());
  d.max_len = max_len;
  return d;
}

}  // namespace meshtrain::model
