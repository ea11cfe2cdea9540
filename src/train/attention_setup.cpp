#include "meshtrain/train/attention_setup.h"

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/attention_backend.h"

namespace meshtrain::train {

void setup_attention_backend(const Config& cfg, const at::Device& device, bool bf16, bool documents) {
  const AttentionBackend b = cfg.train.attention_backend;
  // automatic included: every backend on, whatever an earlier run in this process chose.
  if (b == AttentionBackend::automatic) return model::use_attention_backend(b);
  const ModelConfig& m = cfg.model;
  const int64_t tp = cfg.parallel.tp, kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const model::AttentionShape s{.batch = cfg.train.micro_batch_size, .heads = m.n_head / tp, .kv_heads = kv / tp,
                                .seq_len = cfg.data.seq_len, .head_dim = m.d_model / m.n_head,
                                .dtype = bf16 ? at::kBFloat16 : at::kFloat, .device = device,
                                .dropout = m.dropout, .documents = documents};
  model::check_attention_backend(b, s);
  model::use_attention_backend(b);
  log::info("attention: %s only (%s)", enum_c_str(b), s.describe().c_str());
}

}  // namespace meshtrain::train
