// One layout's plan and the search over all layouts (layout_search.h).
#include "meshtrain/plan/layout_search.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/rank_state.h"

namespace meshtrain::plan {
namespace {

std::string describe(const Config& cfg, int64_t gpus) {
  const RankLayout l = RankLayout::from(cfg, gpus);
  std::string s;
  auto part = [&](const std::string& p) { s += (s.empty() ? "" : " × ") + p; };
  if (l.pp > 1) part("pp " + std::to_string(l.pp));
  if (l.zero_stage == 0 && l.dp > 1) part("ddp " + std::to_string(l.dp));
  if (l.zero_stage > 0 && l.zero_stage < 3) part("zero-" + std::to_string(l.zero_stage) + " " + std::to_string(l.dp));
  if (l.zero_stage == 3) part(l.hsdp ? "hsdp " + std::to_string(l.dp) + "×" + std::to_string(l.fsdp)
                                     : "fsdp " + std::to_string(l.shard));
  if (l.tp > 1) part(std::string("tp ") + std::to_string(l.tp) + (cfg.parallel.sequence_parallel ? " sp" : ""));
  if (s.empty()) s = "single";
  if (cfg.train.activation_checkpointing) s += ", ac";
  return s;
}

bool divides(int64_t a, int64_t b) { return b > 0 && a % b == 0; }

// What a search tries besides the layout: the config as it is, then for a full fine-tune the optimizer state
// offloaded to host memory (the same training, less GPU memory) and, for Llama, LoRA of rank 16 on every
// projection instead (another job: adapters only, so its rows rank after the full fine-tune's that fit).
struct Variant {
  std::string suffix;        // appended to the layout's name
  std::string note;          // said in the row
  bool changes_job = false;  // LoRA instead of a full fine-tune
  void (*apply)(Config&) = nullptr;
};

std::vector<Variant> variants(const Config& cfg) {
  std::vector<Variant> out = {{"", "", false, nullptr}};
  if (cfg.model.lora_rank > 0) return out;
  if (cfg.optimizer.offload == OptimizerOffload::none)
    out.push_back({", offload", "optimizer.offload=cpu", false,
                   [](Config& c) { c.optimizer.offload = OptimizerOffload::cpu; }});
  if (cfg.model.family == Family::llama)
    out.push_back({", lora r16", "model.lora_rank=16: adapters only, instead of the full fine-tune", true, [](Config& c) { c.model.lora_rank = 16; }});
  return out;
}

// The planner's figures are a GPU's (CUDA context, NCCL, bf16 autocast, a GPU's peak FLOP/s); a config that
// trains on the CPU would get them presented as its own, so it is refused with the way to plan it for GPUs.
void require_gpu_config(const Config& cfg) {
  MT_USER_CHECK(cfg.train.device != TrainDevice::cpu, "meshtrain plan: ",
                cfg.source.empty() ? "the config" : cfg.source,
                " sets train.device: cpu; the planner models GPU layouts only (memory and step time on --gpu), "
                "not a CPU run; valid: train.device auto or cuda (e.g. --set train.device=cuda to plan it for GPUs)");
}

// Pipeline layouts are planned, with what the model leaves out said in the row.
const char* const kPipelineNote =
    "pp: 1F1B over grad_accum micro-batches; stage-to-stage transfers not timed; memory an upper bound "
    "(first stage's activations + last stage's head on one rank)";

// The plan of `c` as one row of a search, named and noted by its variant; a layout the config rules refuse
// (seq_len not divisible for sequence parallelism, offload under ZeRO-1/2 with accumulation) is skipped.
void add_row(std::vector<PlanRow>& rows, const Config& c, const Variant& v, const PlanOptions& opts,
             const MfuTable& mfu) {
  try {
    PlanRow row = plan_layout(c, opts, mfu);
    row.layout += v.suffix;
    row.changes_job = v.changes_job;
    if (!v.note.empty()) row.note = row.note.empty() ? v.note : v.note + "; " + row.note;
    rows.push_back(std::move(row));
  } catch (const UserError&) {
  }
}

}  // namespace

PlanRow plan_layout(Config cfg, const PlanOptions& opts, const MfuTable& mfu) {
  require_gpu_config(cfg);
  MT_USER_CHECK(opts.gpus >= 1 && opts.nodes >= 1 && opts.gpus % opts.nodes == 0, "--gpus ", opts.gpus,
                " over --nodes ", opts.nodes, ": valid: GPUs ≥ 1, a multiple of the node count");
  const GpuSpec gpu = gpu_spec(opts.gpu);
  const int64_t pp_real = cfg.parallel.pp;
  // Resolved and validated as one stage of gpus / pp ranks: the planner models a pipeline by its own rules
  // (held_microbatches(), the bubble), so the pipeline's run-time rules (pp_microbatches) do not enter here.
  cfg.parallel.pp = 1;
  const ParallelConfig& p = cfg.parallel;
  const int64_t need = std::max<int64_t>(pp_real, 1) * p.fsdp * p.tp * std::max<int64_t>(p.dp, 1);
  MT_USER_CHECK(opts.gpus % need == 0, "--gpus ", opts.gpus, ": ", cfg.source.empty() ? "the config" : cfg.source,
                "'s layout needs a multiple of ", p.dp > 0 ? cat("dp(", p.dp, ") × ") : std::string(), "pp(", pp_real,
                ") × fsdp(", p.fsdp, ") × tp(", p.tp, ") = ", need, " GPUs; valid: --gpus ", need,
                " (or a multiple), or --search for the layouts of ", opts.gpus, " GPU(s)");
  resolve(cfg, static_cast<int>(opts.gpus / pp_real));
  validate(cfg, static_cast<int>(opts.gpus / pp_real));
  cfg.parallel.pp = pp_real;
  PlanRow row{describe(cfg, opts.gpus), cfg, estimate_memory(cfg, opts.gpus, gpu),
              estimate_step_time(cfg, opts.gpus, opts.nodes, gpu, mfu), ""};
  if (pp_real > 1) row.note = kPipelineNote;
  return row;
}

std::vector<PlanRow> search_layouts(const Config& cfg, const PlanOptions& opts, const MfuTable& mfu) {
  require_gpu_config(cfg);
  const ModelConfig& m = cfg.model;
  const int64_t G = opts.gpus, per_node = G / std::max<int64_t>(opts.nodes, 1);
  // Every layout trains the config's global batch (sequences per step over its data ranks), so their step times
  // compare: fewer data ranks accumulate more micro-batches. A layout it does not divide rounds up.
  Config resolved = cfg;
  resolve(resolved, static_cast<int>(G / std::max<int64_t>(cfg.parallel.pp, 1)));
  const int64_t global = resolved.train.micro_batch_size * resolved.train.grad_accum * resolved.parallel.dp *
                         resolved.parallel.fsdp;
  std::vector<PlanRow> rows;
  for (int64_t pp = 1; pp <= G; ++pp) {
    if (!divides(G, pp) || !divides(m.n_layer, pp)) continue;
    for (int64_t tp = 1; tp <= G / pp; ++tp) {
      if (!divides(G / pp, tp) || tp > per_node || !divides(m.n_head, tp) || !divides(m.n_kv_head, tp) ||
          !divides(m.d_ff, tp))
        continue;
      const int64_t data = G / pp / tp;
      for (int64_t fsdp = 1; fsdp <= data; ++fsdp) {
        if (!divides(data, fsdp)) continue;
        const int64_t dp = data / fsdp;
        // Data-parallel flavours: over dp alone DDP / ZeRO-1 / ZeRO-2; FSDP (or HSDP) when fsdp > 1.
        std::vector<int64_t> stages = fsdp > 1 ? std::vector<int64_t>{3} : dp > 1 ? std::vector<int64_t>{0, 1, 2}
                                                                                 : std::vector<int64_t>{0};
        for (int64_t zero : stages)
          for (bool ac : {false, true})
            for (const Variant& v : variants(cfg)) {
              Config c = cfg;
              if (v.apply) v.apply(c);
              c.parallel.pp = pp, c.parallel.tp = tp, c.parallel.fsdp = fsdp, c.parallel.dp = dp;
              c.parallel.zero_stage = fsdp > 1 ? 0 : zero;
              c.parallel.sequence_parallel = cfg.parallel.sequence_parallel && tp > 1;
              c.train.activation_checkpointing = ac;
              const int64_t per_step = c.train.micro_batch_size * dp * fsdp;
              c.train.grad_accum = std::max<int64_t>(1, (global + per_step - 1) / per_step);
              add_row(rows, c, v, opts, mfu);
            }
      }
    }
  }
  // A layout that does not fit is no choice, however fast: those that fit come first, fastest first — the
  // config's own training before LoRA instead of it.
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.memory.fits != b.memory.fits) return a.memory.fits;
    if (a.changes_job != b.changes_job) return b.changes_job;
    return a.time.step_s < b.time.step_s;
  });
  return rows;
}

}  // namespace meshtrain::plan
