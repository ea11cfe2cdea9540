// resolve(): turns the "0 / empty = derive it" conventions of config.h into concrete values, so every consumer
// reads one number instead of re-deriving it. Safe on an invalid config (it never divides by zero and leaves
// values it cannot derive, e.g. dp when the world size does not divide); validate() reports those.
#include "meshtrain/core/config.h"

namespace meshtrain {
namespace {

// SwiGLU keeps the parameter count of a 4×d GELU MLP with 2/3 of the width, rounded up to a multiple of 256
// for matmul-friendly shapes (the rule of Meta's reference code with multiple_of = 256).
int64_t llama_d_ff(int64_t d_model) {
  const int64_t hidden = 8 * d_model / 3;
  return (hidden + 255) / 256 * 256;
}

}  // namespace

void resolve(Config& cfg, int world_size) {
  ModelConfig& m = cfg.model;
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = m.family == "llama" ? llama_d_ff(m.d_model) : 4 * m.d_model;

  if (cfg.data.seq_len == 0) cfg.data.seq_len = m.max_seq_len;

  ParallelConfig& p = cfg.parallel;
  const int64_t inner = p.pp * p.fsdp * p.tp;
  if (p.dp == 0 && world_size >= 1 && inner >= 1 && world_size % inner == 0) p.dp = world_size / inner;

  if (cfg.checkpoint.dir.empty()) cfg.checkpoint.dir = cfg.train.out_dir + "/checkpoints";
  if (cfg.logging.metrics.empty()) cfg.logging.metrics = cfg.train.out_dir + "/metrics.jsonl";
}

}  // namespace meshtrain
