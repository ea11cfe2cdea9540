// Text tables and JSON of plans (plan_report.h).
#include "meshtrain/plan/plan_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace meshtrain::plan {
namespace {

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  return buf;
}

std::string line(const char* fmt, const std::string& a, const std::string& b) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a.c_str(), b.c_str());
  return buf;
}

nlohmann::json items_json(const MemoryItems& m) {
  return {{"params", m.params},           {"master", m.master},       {"frozen", m.frozen},
          {"grads", m.grads},
          {"optimizer", m.optimizer},     {"gathered", m.gathered},   {"weight_copies", m.weight_copies},
          {"activations", m.activations}, {"loss", m.loss},           {"comm_buffers", m.comm_buffers},
          {"transient", m.transient}};
}

// The step line's host update (optimizer offload): what shows, and what the delayed update hides.
std::string host_update_text(const StepTime& t) {
  if (t.host_update_s <= 0) return "";
  char buf[128];
  std::snprintf(buf, sizeof buf, " + host update %.3f s (of %.3f s)", t.host_exposed_s, t.host_update_s);
  return buf;
}

}  // namespace

std::string layout_table(const PlanRow& r, const PlanOptions& o) {
  const MemoryEstimate& m = r.memory;
  const MemoryItems& p = m.peak;
  std::string s = "layout: " + r.layout + " on " + std::to_string(o.gpus) + " × " + o.gpu + " (" +
                  std::to_string(o.nodes) + " node(s))" + (r.note.empty() ? "" : " — " + r.note) + "\n\n";
  s += "memory per GPU (worst rank), at the peak (" + m.peak_at + ")\n";
  const char* f = "  %-48s %12s\n";
  // Streamed offload: the trainable parameters (FSDP: this rank's shards) in the compute dtype, the master on
  // the host (rank_state.h).
  s += line(f, "parameters (module copy / streamed shards)", gib(p.params));
  s += line(f, "fp32 master shards", gib(p.master));
  // Shown only where something is frozen: those shards are no master copy (LoRA's base is held in the compute
  // dtype, bf16 on a GPU; train.freeze's in fp32).
  if (p.frozen > 0) s += line(f, "frozen parameter shards (no master copy)", gib(p.frozen));
  s += line(f, "gradients", gib(p.grads));
  s += line(f, m.host_optimizer > 0 ? "AdamW state (offloaded: none on device)" : "AdamW state (fp32 m, v; on device)",
            gib(p.optimizer));
  s += line(f, "gathered FSDP units (incl. prefetch)", gib(p.gathered));
  s += line(f, "bf16 weight copies (autocast, kept for backward)", gib(p.weight_copies));
  s += line(f, "activations", gib(p.activations));
  s += line(f, "logits / loss", gib(p.loss));
  s += line(f, "communication buffers", gib(p.comm_buffers));
  s += line(f, "transients, token ids", gib(p.transient));
  s += line(f, "= predicted peak allocated (peak_memory_bytes)", gib(m.peak_allocated));
  s += line(f, "+ allocator slack (5 %)", gib(m.allocator_slack));
  s += line(f, "+ CUDA context", gib(m.context));
  s += line(f, "+ NCCL buffers", gib(m.nccl));
  s += line(f, "= device total", gib(m.device_total) + (m.fits ? "" : "  DOES NOT FIT"));
  s += line(f, "  of the GPU's", gib(m.device_memory));
  if (m.host_optimizer > 0)
    s += line(f, "host memory (offload: master, m, v; gradient buffers unless held)", gib(m.host_optimizer));
  // Per node: every GPU's rank keeps its snapshots in the node's memory file system.
  if (m.host_snapshots > 0)
    s += line(f, "host memory per node, in-memory checkpoints",
              gib(m.host_snapshots * snapshot_copies(o.nodes) * (o.gpus / o.nodes)));
  s += "\nactivations per block and micro-batch: " + gib(m.activation.block) + " saved, " +
       gib(m.activation.block_checkpoint) + " with activation checkpointing; head and loss " +
       gib(m.activation.head.saved) + "\n";
  const StepTime& t = r.time;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\nstep time: %.3f s = compute %.3f s (%.3g TFLOP per GPU at MFU %.1f %% of %s) + parameter "
                "passes %.3f s (%.1f GB)%s + exposed communication %.3f s%s\n  %.0f tokens/step, %.0f tokens/s\n",
                t.step_s, t.compute_s, t.flops_per_gpu / 1e12, 100 * t.mfu, t.mfu_source.c_str(), t.pass_s,
                t.pass_bytes / 1e9, host_update_text(t).c_str(), t.exposed_comm_s,
                t.bubble_s > 0 ? (" + pipeline bubble " + std::to_string(t.bubble_s) + " s").c_str() : "",
                t.tokens_per_step, t.tokens_per_s);
  s += buf;
  for (const auto& c : t.comm) {
    std::snprintf(buf, sizeof buf, "  %-44s %9.1f MB over %-7s %.3f s, exposed %.3f s (%s)\n", c.what.c_str(),
                  c.bytes / 1e6, c.link.c_str(), c.seconds, c.exposed_s, c.overlap.c_str());
    s += buf;
  }
  return s;
}

std::string search_table(const std::vector<PlanRow>& rows, const PlanOptions& o) {
  std::string s = "layouts of " + std::to_string(o.gpus) + " × " + o.gpu + ": those that fit, fastest first";
  if (!rows.empty()) {
    // The searched choices are the mesh, the ZeRO stage, activation checkpointing and, for a full fine-tune,
    // optimizer offload and LoRA instead (layout_search.h); the rest is the config's.
    const Config& c = rows.front().cfg;
    const bool full = std::any_of(rows.begin(), rows.end(),
                                  [](const PlanRow& r) { return !r.changes_job && r.cfg.model.lora_rank == 0; });
    s += full ? "; activation checkpointing on and off; the optimizer offloaded or not; LoRA r16 instead of the "
                "full fine-tune after the full fine-tune's rows that fit"
              : "; activation checkpointing on and off; LoRA rank " + std::to_string(c.model.lora_rank) +
                    " and optimizer offload " + (c.optimizer.offload == OptimizerOffload::cpu ? "cpu" : "off") +
                    " as the config sets them";
  }
  s += "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-40s %10s %12s %12s %8s  %s\n", "layout", "step s", "tokens/s", "peak GiB",
                "fits", "note");
  s += buf;
  bool separated = false;
  for (const auto& r : rows) {
    if (!r.memory.fits && !separated) {
      separated = true;
      s += "  -- these do not fit the GPU's " + gib(rows.back().memory.device_memory) + ", fastest first --\n";
    }
    std::snprintf(buf, sizeof buf, "  %-40s %10.3f %12.0f %12.2f %8s  %s\n", r.layout.c_str(), r.time.step_s,
                  r.time.tokens_per_s, static_cast<double>(r.memory.device_total) / (1 << 30),
                  r.memory.fits ? "yes" : "NO", r.note.c_str());
    s += buf;
  }
  return s;
}

std::string plan_json(const std::vector<PlanRow>& rows, const PlanOptions& o) {
  nlohmann::json j = {{"gpu", o.gpu}, {"gpus", o.gpus}, {"nodes", o.nodes}, {"layouts", nlohmann::json::array()}};
  for (const auto& r : rows) {
    const auto& m = r.memory;
    nlohmann::json comm = nlohmann::json::array();
    for (const auto& c : r.time.comm)
      comm.push_back({{"what", c.what}, {"link", c.link}, {"bytes", c.bytes}, {"seconds", c.seconds},
                      {"exposed_s", c.exposed_s}, {"overlap", c.overlap}});
    j["layouts"].push_back(
        {{"layout", r.layout},
         {"fits", m.fits},
         {"note", r.note},
         {"changes_job", r.changes_job},
         {"offload", r.cfg.optimizer.offload == OptimizerOffload::cpu},
         {"lora_rank", r.cfg.model.lora_rank},
         {"parallel", {{"dp", r.cfg.parallel.dp}, {"fsdp", r.cfg.parallel.fsdp}, {"tp", r.cfg.parallel.tp},
                       {"pp", r.cfg.parallel.pp}, {"zero_stage", r.cfg.parallel.zero_stage},
                       {"activation_checkpointing", r.cfg.train.activation_checkpointing}}},
         {"memory", {{"peak_at", m.peak_at}, {"items", items_json(m.peak)}, {"peak_allocated_bytes", m.peak_allocated},
                     {"allocator_slack_bytes", m.allocator_slack}, {"context_bytes", m.context},
                     {"nccl_bytes", m.nccl}, {"device_total_bytes", m.device_total},
                     {"device_memory_bytes", m.device_memory}, {"fits", m.fits},
                     {"host_optimizer_bytes", m.host_optimizer},
                     {"host_snapshot_bytes", m.host_snapshots},
                     {"activation_block_bytes", m.activation.block},
                     {"activation_block_checkpointed_bytes", m.activation.block_checkpoint},
                     {"head_saved_bytes", m.activation.head.saved}}},
         {"time", {{"step_s", r.time.step_s}, {"compute_s", r.time.compute_s}, {"pass_s", r.time.pass_s},
                   {"pass_bytes", r.time.pass_bytes}, {"host_update_s", r.time.host_update_s},
                   {"host_exposed_s", r.time.host_exposed_s}, {"exposed_comm_s", r.time.exposed_comm_s},
                   {"bubble_s", r.time.bubble_s}, {"mfu", r.time.mfu}, {"mfu_source", r.time.mfu_source},
                   {"tokens_per_s", r.time.tokens_per_s}, {"model_flops_per_token", r.time.model_flops_per_token},
                   {"communication", comm}}}});
  }
  return j.dump(2);
}

}  // namespace meshtrain::plan
