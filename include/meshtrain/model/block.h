// Pre-norm transformer block: x + attn(norm(x)), then + mlp(norm(x)).
#pragma once

#include <torch/nn/module.h>

#include "meshtrain/model/attention.h"
#include "meshtrain/model/mlp.h"
#include "meshtrain/model/norm.h"
#include "meshtrain/model/table_rows.h"

namespace meshtrain::model {

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& cfg, const at::TensorOptions& opts);
  // docs: packed documents (model/documents.h); null = each row one document. x_rows: x is these rows of the
  // token embedding's table (the first block's input), for attn_norm to gather again in backward.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     LayerKVCache* cache = nullptr, const Documents* docs = nullptr,
                     const TableRows* x_rows = nullptr);

  Norm attn_norm{nullptr}, mlp_norm{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(Block);

}  // namespace meshtrain::model
