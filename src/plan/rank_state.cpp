// Per-rank state bytes (rank_state.h), parameter by parameter (a run of like blocks' parameter at once).
#include "meshtrain/plan/rank_state.h"

#include <algorithm>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/gradient_streaming.h"
#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {

RankLayout RankLayout::from(const Config& cfg, int64_t world_size) {
  const ParallelConfig& p = cfg.parallel;
  RankLayout l;
  l.fsdp = p.fsdp, l.tp = p.tp, l.pp = p.pp;
  l.dp = p.dp > 0 ? p.dp : std::max<int64_t>(1, world_size / (p.pp * p.fsdp * p.tp));
  l.zero_stage = p.fsdp > 1 && p.zero_stage == 0 ? 3 : static_cast<int>(p.zero_stage);
  l.shard = l.zero_stage == 0 ? 1 : (p.fsdp > 1 ? p.fsdp : l.dp);
  l.hsdp = l.zero_stage > 0 && p.fsdp > 1 && l.dp > 1;
  // parallelize(): a reducer when distributed and there is a dp group to reduce over (or no TP), or forced.
  const bool distributed = world_size > 1;
  l.reducer = l.zero_stage == 0 && ((distributed && (l.dp > 1 || l.tp == 1)) || p.force_wrapper);
  l.param_bytes = p.param_dtype == Dtype::bf16 ? 2 : 4;
  l.reduce_bytes = p.reduce_dtype == Dtype::bf16 ? 2 : 4;
  // The GPU's compute dtype (train.dtype auto = bf16): what LoRA's frozen base is held in (parallelize()).
  l.frozen_bytes = cfg.model.lora_rank > 0 && compute_dtype(cfg.train, /*cuda=*/true) == Dtype::bf16 ? 2 : 4;
  l.alias = l.zero_stage > 0 && l.shard == 1 && !l.hsdp && l.param_bytes == 4 && l.frozen_bytes == 4;
  const GradientLayout grads{.zero_stage = l.zero_stage, .aliased = l.alias, .tp = l.tp, .pp = l.pp,
                             .gradient_shards = l.zero_stage == 3 ? l.shard : 1};
  l.stream = cfg.optimizer.offload == OptimizerOffload::cpu &&
             offload_streams_gradients(grads, cfg.train.grad_accum);
  l.hold = cfg.optimizer.offload == OptimizerOffload::cpu &&
           offload_holds_gradients(grads, cfg.train.grad_accum, cfg.optimizer.offload_delay == 1);
  l.stream_bytes = compute_dtype(cfg.train, /*cuda=*/true) == Dtype::bf16 ? 2 : 4;
  l.nf4 = cfg.model.base_quant == BaseQuant::nf4;
  return l;
}

int64_t nf4_bytes(int64_t n) {
  const int64_t blocks = (n + 63) / 64;
  return (n + 1) / 2 + blocks + 4 * ((blocks + 255) / 256) + 4 * 256 + 4;
}

int64_t nf4_rows(int64_t n) { return (n + 16383) / 16384; }

int64_t nf4_gathered_bytes(int64_t n) { return nf4_rows(n) * kNf4RowBytes; }

int64_t nf4_shard_bytes(int64_t n, int64_t shard) {
  return (nf4_rows(n) + shard - 1) / shard * kNf4RowBytes + 4 * 256 + 4;
}

bool held_in_nf4(const RankLayout& l, const ParamSpec& p, bool train) {
  const std::string suffix = ".weight";
  const bool weight = p.name.size() > suffix.size() &&
                      p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return l.nf4 && !train && p.block >= 0 && p.matmul && weight;
}

namespace {

// How many of the parameters group `g` stands for pipeline stage `stage` of `pp` holds: the blocks of its run
// inside the stage's even share of the layers; the embeddings on the first stage, the final norm and head on
// the last (a tied embedding on both).
int64_t on_stage(const ParamGroup& g, const ModelConfig& m, int64_t stage, int64_t pp) {
  if (pp <= 1) return g.blocks;
  const ParamSpec& p = g.spec;
  if (p.block >= 0) {
    const int64_t per = std::max<int64_t>(1, m.n_layer / pp);
    return std::max<int64_t>(0, std::min(p.block + g.blocks, (stage + 1) * per) - std::max(p.block, stage * per));
  }
  const bool head = p.name.rfind("final_norm", 0) == 0 || p.name.rfind("lm_head", 0) == 0;
  const bool embed = !head;
  return (embed && stage == 0) || ((head || (embed && m.tie_embeddings)) && stage == pp - 1) ? 1 : 0;
}

// One parameter's share of the rank's state (rank_state.h has the rules).
RankState param_state(const ParamSpec& p, bool train, const RankLayout& l, int64_t tp_rank, int64_t shard_rank) {
  RankState s;
  const auto shape = p.tp_shape(tp_rank, l.tp);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (held_in_nf4(l, p, train)) {
    if (l.zero_stage == 0) {  // src/parallel/parallelize.cpp: whole on every rank, outside the layout
      s.frozen += nf4_bytes(numel);
      return s;
    }
    // parallel/fsdp/fully_shard.h: this rank's rows; their gathered whole (ZeRO-1/2 keep it, FSDP while in use).
    s.frozen += nf4_shard_bytes(numel, l.shard);
    if (l.alias) return s;
    (l.zero_stage < 3 ? s.params : s.gathered_params) += nf4_gathered_bytes(numel);
    return s;
  }
  const int64_t held = train ? 4 : l.frozen_bytes;  // parallelize(): LoRA's frozen base in the compute dtype
  if (l.zero_stage == 0) {
    if (l.stream || l.hold) {  // the master on the host; streamed: gradients in DDP's buckets only
      s.params += (train ? l.stream_bytes : l.frozen_bytes) * numel;
      s.grads += train && (l.reducer || l.hold) ? l.stream_bytes * numel : 0;
      s.optimizer += train ? 8 * numel + 4 : 0;
      return s;
    }
    s.params += held * numel;
    s.grads += train ? 4 * numel : 0;
    s.optimizer += train ? 8 * numel + 4 : 0;
    return s;
  }
  // parallel/fsdp/dim0_shard.h: c = ceil(rows / W) rows per rank, padded in the flat buffers.
  const int64_t rows = shape[0], row_numel = numel / std::max<int64_t>(rows, 1);
  const int64_t c = (rows + l.shard - 1) / l.shard;
  const int64_t begin = std::min(rows, shard_rank * c), local = std::min(rows, begin + c) - begin;
  if (train && l.stream) {  // FSDP streamed: the shard in the compute dtype, fp32 master and gradient on the host
    s.params += l.stream_bytes * c * row_numel;
  } else {
    (train ? s.master : s.frozen) += held * c * row_numel;
    s.grads += train ? 4 * c * row_numel : 0;
  }
  s.optimizer += train ? 8 * local * row_numel + 4 : 0;
  if (l.alias) return s;
  const int64_t gathered = train || l.frozen_bytes == 4 ? l.param_bytes : l.frozen_bytes;
  if (l.zero_stage < 3) s.params += gathered * numel;
  else s.gathered_params += gathered * numel;
  return s;
}

RankState state_of(const Config& cfg, const RankLayout& l, const std::vector<ParamGroup>& groups, int64_t tp_rank,
                   int64_t shard_rank, int64_t pp_stage) {
  RankState s;
  for (const auto& g : groups) {
    const int64_t n = on_stage(g, cfg.model, pp_stage, l.pp);
    if (n == 0) continue;
    const RankState one = param_state(g.spec, g.trains, l, tp_rank, shard_rank);
    s.params += n * one.params;
    s.master += n * one.master;
    s.frozen += n * one.frozen;
    s.grads += n * one.grads;
    s.optimizer += n * one.optimizer;
    s.gathered_params += n * one.gathered_params;
  }
  return s;
}

}  // namespace

RankState rank_state(const Config& cfg, int64_t world_size, int64_t tp_rank, int64_t shard_rank, int64_t pp_stage) {
  return state_of(cfg, RankLayout::from(cfg, world_size), param_groups(cfg), tp_rank, shard_rank, pp_stage);
}

RankState worst_rank_state(const Config& cfg, int64_t world_size) {
  const RankLayout l = RankLayout::from(cfg, world_size);
  const std::vector<ParamGroup> groups = param_groups(cfg);
  RankState w;
  for (int64_t stage = 0; stage < l.pp; ++stage)
  for (int64_t t = 0; t < l.tp; ++t)
    for (int64_t r = 0; r < l.shard; ++r) {
      const RankState s = state_of(cfg, l, groups, t, r, stage);
      w.params = std::max(w.params, s.params);
      w.master = std::max(w.master, s.master);
      w.frozen = std::max(w.frozen, s.frozen);
      w.grads = std::max(w.grads, s.grads);
      w.optimizer = std::max(w.optimizer, s.optimizer);
      w.gathered_params = std::max(w.gathered_params, s.gathered_params);
    }
  return w;
}

}  // namespace meshtrain::plan
