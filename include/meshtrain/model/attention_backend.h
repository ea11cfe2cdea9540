// Which SDPA kernel runs attention (train.attention_backend). ATen keeps one enable switch per backend in its
// global context; restricting SDPA to one backend is switching the others off for the process. Whether a
// backend can run a given attention is asked of ATen itself (at::_fused_sdp_choice with only that backend
// on), so the answer follows the installed LibTorch and GPU rather than a table kept here. Packed documents
// run variable-length flash attention where flash is allowed (auto, flash) and can run it, else the masked
// SDPA under the chosen backend (model/attention.h).
//
//   AttentionShape s{.batch = 8, .heads = 32, .kv_heads = 8, .seq_len = 2048, .head_dim = 64,
//                    .dtype = at::kBFloat16, .device = at::Device("cuda:0")};
//   check_attention_backend(AttentionBackend::cudnn, s);  // UserError: the key, the shape, what can run
//   use_attention_backend(AttentionBackend::cudnn);       // every attention of this process from now on
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::model {

// One attention call as the training step makes it: q [batch, heads, seq_len, head_dim], kv_heads key/value
// heads (grouped-query attention when fewer), causal; with `documents`, packed documents (block-causal).
struct AttentionShape {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq_len = 1, head_dim = 1;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  double dropout = 0.0;
  bool documents = false;
  std::string describe() const;  // "q [8, 32, 2048, 64], 8 kv heads, bf16 on cuda:0"
};

// Whether `b` can run attention of shape `s`, forward and backward; `why` (if given) gets ATen's first
// reason when it cannot. automatic always can (math is the fallback).
bool attention_backend_runs(AttentionBackend b, const AttentionShape& s, std::string* why = nullptr);
// The backends that can run `s`, automatic first.
std::vector<AttentionBackend> runnable_attention_backends(const AttentionShape& s);
// UserError naming train.attention_backend, the shape, the reason and the backends that can run it.
void check_attention_backend(AttentionBackend b, const AttentionShape& s);
// Restricts SDPA to `b` for the rest of the process (automatic: every backend enabled, SDPA's own pick).
void use_attention_backend(AttentionBackend b);
// Whether packed documents can take flash attention's variable-length kernel: half-precision CUDA tensors
// and the head sizes it was built for (flash itself allowed is asked separately).
bool varlen_flash_runs(const at::Device& device, at::ScalarType dtype, int64_t head_dim);

}  // namespace meshtrain::model
