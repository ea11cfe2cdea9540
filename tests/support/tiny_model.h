// tiny_model(): the small transformer configs the tests build (a forward/backward in milliseconds on a CPU),
// one helper instead of a ModelConfig filled by hand in every test. A test names only what it needs to differ
// from the defaults — an uneven vocabulary, GQA, a head count tensor parallelism can split — e.g.
//   tiny_model({.family = "llama", .vocab_size = 67, .n_kv_head = 2})
// Header-only; tests/ is on every test binary's include path.
#pragma once

#include <optional>
#include <string>

#include "meshtrain/core/config.h"

namespace meshtrain::testing_support {

struct TinyModel {
  std::string family = "gpt2";  // a spelling of model.family, so tests can be parameterised by it
  int64_t vocab_size = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // 0: n_head (no GQA)
  int64_t d_model = 32;
  int64_t d_ff = 0;       // 0: the family's default (config resolution)
  int64_t max_seq_len = 16;
  std::optional<bool> tie_embeddings;  // unset: tied for gpt2, untied for llama
  std::optional<double> rope_theta;    // unset: the config default
  double dropout = 0.0;
};

inline ModelConfig tiny_model(const TinyModel& t = {}) {
  ModelConfig m;
  m.family = parse_enum<Family>(t.family, "tiny_model family");
  m.vocab_size = t.vocab_size;
  m.n_layer = t.n_layer;
  m.n_head = t.n_head;
  m.n_kv_head = t.n_kv_head;
  m.d_model = t.d_model;
  m.d_ff = t.d_ff;
  m.max_seq_len = t.max_seq_len;
  m.tie_embeddings = t.tie_embeddings.value_or(m.family == Family::gpt2);
  if (t.rope_theta) m.rope_theta = *t.rope_theta;
  m.dropout = t.dropout;
  return m;
}

}  // namespace meshtrain::testing_support
