// Step time = compute + parameter passes + exposed host update + exposed communication + pipeline bubble
// (step_time.h).
#include "meshtrain/plan/step_time.h"

#include <algorithm>
#include <map>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/mesh_shape.h"
#include "meshtrain/plan/param_table.h"
#include "meshtrain/plan/rank_state.h"
#include "meshtrain/plan/training_flops.h"

namespace meshtrain::plan {
namespace {

// Whether the group along `dim` stays inside one node: its ranks span stride × size consecutive ranks, the
// stride being the product of the sizes of the dims after it in parallel.order (innermost last).
bool intra_node(const std::string& order, const std::map<std::string, int64_t>& sizes, const std::string& dim,
                int64_t gpus_per_node) {
  const std::vector<Dim> dims = MeshShape::parse_order(order);
  int64_t stride = 1;
  for (auto it = dims.rbegin(); it != dims.rend() && dim_name(*it) != dim; ++it) stride *= sizes.at(dim_name(*it));
  return stride * sizes.at(dim) <= gpus_per_node;
}

// Parameter counts: global where they price FLOPs, this tp rank's block ("local") where they price collectives.
struct Counts {
  double trainable = 0;        // local
  double frozen = 0;           // local: frozen parameters (LoRA's base), gathered by FSDP but never reduced
  double embed_trainable = 0;  // local: the root unit's (embeddings, head) trainable part
  double embed_frozen = 0;     // local: … and its frozen part
  double nf4_bytes = 0;        // QLoRA's NF4 weights' rows, which FSDP gathers as bytes (rank_state.h)
};

Counts counts(const Config& cfg, int64_t tp) {
  Counts c;
  RankLayout nf4;
  nf4.nf4 = cfg.model.base_quant == BaseQuant::nf4;
  for (const auto& g : param_groups(cfg)) {
    const ParamSpec& p = g.spec;
    const double k = static_cast<double>(g.blocks);  // the parameters the group stands for
    int64_t local = 1;
    for (int64_t d : p.tp_shape(0, tp)) local *= d;
    const bool embed = p.name.rfind("tok_embed", 0) == 0 || p.name.rfind("pos_embed", 0) == 0 ||
                       p.name.rfind("lm_head", 0) == 0;
    const bool train = g.trains;
    // QLoRA's NF4 weights: gathered by FSDP as their bytes (0.516 a value), not in a float dtype.
    if (held_in_nf4(nf4, p, train)) c.nf4_bytes += k * static_cast<double>(nf4_gathered_bytes(local));
    else (train ? c.trainable : c.frozen) += k * static_cast<double>(local);
    if (embed) (train ? c.embed_trainable : c.embed_frozen) += k * static_cast<double>(local);
  }
  return c;
}

// The optimizer's elements on this rank: its stage's trainable parameters, ÷ the shard group under ZeRO/FSDP.
double optimizer_elements(const RankLayout& l, const Counts& n) {
  return n.trainable / static_cast<double>(l.pp) / static_cast<double>(l.zero_stage >= 1 ? l.shard : 1);
}

// Bytes of the passes over the parameters this rank holds, per step (step_time.h).
double pass_bytes(const Config& cfg, const RankLayout& l, const Counts& n) {
  const double pp = static_cast<double>(l.pp), A = static_cast<double>(cfg.train.grad_accum);
  const double trainable = n.trainable / pp;
  const bool offload = cfg.optimizer.offload == OptimizerOffload::cpu;
  const double optimizer = offload ? 0 : optimizer_elements(l, n);
  const bool bf16 = compute_dtype(cfg.train, true) == Dtype::bf16;
  const bool casts = l.casts_weights(bf16);
  const double cast = casts ? (n.trainable + (l.frozen_bytes == 4 ? n.frozen : 0)) / pp : 0;
  const double recasts = cfg.train.activation_checkpointing ? 2 : 1;
  // Weight gradients in fp32 buffers (streamed or held offload keeps them in bf16). Where the linears cast their
  // fp32 weights themselves (model/linear/master_linear.h), ∂W comes out of the GEMM in fp32: the first
  // micro-batch's is the gradient, each later one is added to it. Elsewhere bf16 gradients are accumulated.
  const double grads = bf16 && !l.stream && !l.hold ? trainable : 0;
  const double grad_bytes = casts ? (A - 1) * kAddPassBytes * grads : A * kGradPassBytes * grads;
  return kOptimizerPassBytes * optimizer + A * kCastPassBytes * recasts * cast + grad_bytes;
}

}  // namespace

StepTime estimate_step_time(const Config& cfg, int64_t gpus, int64_t nodes, const GpuSpec& gpu, const MfuTable& mfu) {
  const RankLayout l = RankLayout::from(cfg, gpus);
  const ModelConfig& m = cfg.model;
  const Counts n = counts(cfg, l.tp);
  const double D = static_cast<double>(m.d_model);
  const double T = static_cast<double>(cfg.data.seq_len), L = static_cast<double>(m.n_layer);
  const double A = static_cast<double>(cfg.train.grad_accum);
  const double tokens_rank = static_cast<double>(cfg.train.micro_batch_size) * T * A;
  const bool ac = cfg.train.activation_checkpointing;
  StepTime s;
  const TrainingFlops flops = training_flops_per_token(cfg);
  s.model_flops_per_token = flops.model_per_token;
  s.flops_per_gpu = tokens_rank * flops.hardware_per_token / static_cast<double>(l.tp * l.pp);
  const double pass_rate = gpu.hbm_bytes_s * kPassEfficiency;
  s.mfu = mfu.lookup(m, &s.mfu_source, kRowPassBytes, kPassEfficiency);
  s.compute_s = s.flops_per_gpu / (gpu.peak_flops * s.mfu);
  s.pass_bytes = pass_bytes(cfg, l, n);
  s.pass_s = pass_rate > 0 ? s.pass_bytes / pass_rate : 0;
  const double fwd_s = s.compute_s * (ac ? 0.25 : 1.0 / 3), bwd_s = s.compute_s - fwd_s;
  if (cfg.optimizer.offload == OptimizerOffload::cpu) {
    s.host_update_s = optimizer_elements(l, n) / kHostUpdateParamsPerS;
    const double hidden_under = cfg.optimizer.offload_delay > 0 ? s.compute_s + s.pass_s : 0;
    s.host_exposed_s = std::max(0.0, s.host_update_s - hidden_under);
  }

  const int64_t per_node = std::max<int64_t>(1, gpus / std::max<int64_t>(nodes, 1));
  const std::map<std::string, int64_t> sizes = {{"pp", l.pp}, {"dp", l.dp}, {"fsdp", l.fsdp}, {"tp", l.tp}};
  auto add = [&](const std::string& what, const std::string& dim, double bytes, double ring, double hidden_under,
                 double unhidden_fraction, const std::string& overlap) {
    const int64_t size = sizes.at(dim);
    if (size <= 1 || bytes <= 0) return;
    const bool intra = intra_node(cfg.parallel.order, sizes, dim, per_node);
    Collective c{what, intra ? "nvlink" : "network", bytes, 0, 0, overlap};
    c.seconds = ring * (static_cast<double>(size) - 1) / static_cast<double>(size) * bytes /
                (intra ? gpu.nvlink_bytes_s : gpu.network_bytes_s);
    c.exposed_s = std::max(c.seconds - hidden_under, c.seconds * unhidden_fraction);
    s.comm.push_back(c);
  };
  const double rb = l.reduce_bytes, pb = l.param_bytes, P = n.trainable;
  // The unit/bucket holding the embeddings goes last (reductions) or first (gathers): its share of the bytes
  // cannot hide. Reductions carry trainable parameters only; FSDP gathers the frozen ones too, in the dtype
  // they are held in (rank_state.h: a bf16 base is gathered as it is, an fp32 one in param_dtype).
  const double last = std::min(1.0, n.embed_trainable / std::max(P, 1.0));
  const double fb = l.frozen_bytes == 4 ? pb : l.frozen_bytes;
  const double gathered = pb * P + fb * n.frozen + n.nf4_bytes;
  const double first = std::min(1.0, (pb * n.embed_trainable + fb * n.embed_frozen) / std::max(gathered, 1.0));
  const std::string shard_dim = l.fsdp > 1 ? "fsdp" : "dp";
  if (l.zero_stage == 0) {
    add("ddp all-reduce of gradients", "dp", rb * P, 2, bwd_s, last, "under backward, but the last bucket");
  } else if (l.zero_stage < 3) {
    const double times = l.zero_stage == 2 ? A : 1;
    add("zero reduce-scatter of gradients", shard_dim, times * rb * P, 1, l.zero_stage == 2 ? bwd_s : 0, last,
        l.zero_stage == 2 ? "under backward" : "after the last backward");
    add("zero all-gather of parameters", shard_dim, pb * P, 1, 0, 1, "before the next forward, not hidden");
  } else {
    // Resharded after forward, every unit — a frozen one too, whose weights the input's gradient (and the
    // recompute under activation checkpointing) needs — is gathered again in backward.
    const double gathers = cfg.parallel.fsdp_reshard_after_forward ? 2 : 1;
    add("fsdp all-gather (forward)", shard_dim, A * gathered, 1, fwd_s, first, "prefetched under forward");
    if (gathers > 1)
      add("fsdp all-gather (backward)", shard_dim, A * gathered, 1, bwd_s / 2, 0, "prefetched under backward");
    add("fsdp reduce-scatter of gradients", shard_dim, A * rb * P, 1, bwd_s / 2, last, "under backward");
    if (l.hsdp) add("hsdp all-reduce over replicas", "dp", rb * P / static_cast<double>(l.shard), 2, 0, 1, "after backward");
  }
  if (l.tp > 1) {
    const double c = compute_dtype(cfg.train, true) == Dtype::bf16 ? 2 : 4;
    const double per_mb = static_cast<double>(cfg.train.micro_batch_size) * T * D * c;
    const double per_layer = ac ? 6 : 4;  // forward 2, backward 2, recomputed forward 2
    add("tp all-reduce / reduce-scatter + all-gather", "tp", A * L / static_cast<double>(l.pp) * per_layer * per_mb,
        2, 0, 1, "on the critical path");
  }
  for (const auto& c : s.comm) s.exposed_comm_s += c.exposed_s;
  if (l.pp > 1) {
    // 1F1B: (pp − 1) idle slots of a micro-batch's forward + backward at each end of the step.
    s.bubble_s = s.compute_s * static_cast<double>(l.pp - 1) / A;
  }
  s.step_s = s.compute_s + s.pass_s + s.host_exposed_s + s.exposed_comm_s + s.bubble_s;
  s.tokens_per_step = tokens_rank * static_cast<double>(l.dp * l.fsdp);
  s.tokens_per_s = s.tokens_per_step / s.step_s;
  return s;
}

}  // namespace meshtrain::plan
