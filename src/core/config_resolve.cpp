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

// The smallest divisor of the batch that is ≥ 2 × pp and a multiple of `step`: enough micro-batches for the
// bubble (pp − 1)/(m + pp − 1) to be at most a third; else one sequence per micro-batch; 0 when neither fits.
int64_t auto_microbatches(int64_t batch, int64_t pp, int64_t step) {
  for (int64_t m = 2 * pp; m <= batch; ++m)
    if (batch % m == 0 && m % step == 0) return m;
  return batch >= pp && batch % step == 0 ? batch : 0;
}

}  // namespace

void resolve(Config& cfg, int world_size) {
  ModelConfig& m = cfg.model;
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = m.family == Family::llama ? llama_d_ff(m.d_model) : 4 * m.d_model;

  if (cfg.data.seq_len == 0) cfg.data.seq_len = m.max_seq_len;

  ParallelConfig& p = cfg.parallel;
  const int64_t inner = p.pp * p.fsdp * p.tp;
  if (p.dp == 0 && world_size >= 1 && inner >= 1 && world_size % inner == 0) p.dp = world_size / inner;

  const bool interleaved = p.pp_schedule == PipelineKind::interleaved_1f1b;
  if (p.pp_virtual_stages == 0) p.pp_virtual_stages = interleaved ? 2 : 1;
  if (p.pp_microbatches == 0 && p.pp > 1)
    p.pp_microbatches = auto_microbatches(cfg.train.micro_batch_size * cfg.train.grad_accum, p.pp,
                                          interleaved ? p.pp : 1);
  if (p.pp_microbatches == 0 && p.pp == 1) p.pp_microbatches = 1;

  if (cfg.checkpoint.dir.empty()) cfg.checkpoint.dir = cfg.train.out_dir + "/checkpoints";
  if (cfg.logging.metrics.empty()) cfg.logging.metrics = cfg.train.out_dir + "/metrics.jsonl";
}

}  // namespace meshtrain
