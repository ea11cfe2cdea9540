// copy_model_shape / gives_model_shape; see model_shape.h.
#include "meshtrain/core/model_shape.h"

namespace meshtrain {

void copy_model_shape(const ModelConfig& from, ModelConfig& to) {
  to.preset = from.preset;
  to.family = from.family;
  to.vocab_size = from.vocab_size;
  to.n_layer = from.n_layer;
  to.n_head = from.n_head;
  to.n_kv_head = from.n_kv_head;
  to.d_model = from.d_model;
  to.d_ff = from.d_ff;
  to.max_seq_len = from.max_seq_len;
  to.tie_embeddings = from.tie_embeddings;
  to.norm_eps = from.norm_eps;
  to.rope_theta = from.rope_theta;
  to.bos_token_id = from.bos_token_id;
  to.eos_token_id = from.eos_token_id;
}

bool gives_model_shape(const ModelConfig& m) {
  // The shape alone, over defaults everywhere else: equal to the default config iff no shape field was moved.
  ModelConfig shape_only;
  copy_model_shape(m, shape_only);
  return !(shape_only == ModelConfig{});
}

}  // namespace meshtrain
