// validate(): every rule on a Config in one place, checked before any worker starts. The first broken rule
// is reported as one line, "FILE: section.key: given X; valid Y", with the arithmetic where there is some.
//
// Per-field rules run in table order (required keys, numeric bounds below; an enumeration's spelling is
// checked by the loader, its type holds no other); cross-field rules (divisibility, sequence length, mesh order, world size) run after them.
// validate() accepts a config before or after resolve(): 0 still means "derive it" (dp, n_kv_head, seq_len).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/data_sources.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"
#include "meshtrain/core/mesh_shape.h"
#include "meshtrain/core/model_size.h"
#include "meshtrain/core/nccl_env.h"

namespace meshtrain {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxCount = double(int64_t{1} << 30);  // the engine's counts are ints

// A numeric field's admissible interval; ints use the same table (their values are exact in a double).
struct Bound {
  std::string_view path;
  double lo;
  bool lo_open;  // lo itself excluded
  double hi = kInf;
  bool hi_open = true;
};

// clang-format off
const Bound kBounds[] = {
  {"model.vocab_size", 1, false},       {"model.n_layer", 1, false},        {"model.n_head", 1, false},
  {"model.n_kv_head", 0, false},        {"model.d_model", 1, false},        {"model.d_ff", 0, false},
  {"model.max_seq_len", 1, false},      {"model.norm_eps", 0, true},        {"model.rope_theta", 0, true},
  {"model.dropout", 0, false, 1, true}, {"model.bos_token_id", -1, false}, {"model.eos_token_id", -1, false},
  {"parallel.dp", 0, false},            {"parallel.fsdp", 1, false},        {"parallel.tp", 1, false},
  {"parallel.pp", 1, false},            {"parallel.bucket_mb", 0, true},    {"parallel.timeout_s", 0, true},
  {"parallel.bucket_first_mb", 0, true}, {"parallel.zero_stage", 0, false, 3, false},
  {"parallel.pp_virtual_stages", 0, false}, {"parallel.pp_microbatches", 0, false},
  {"parallel.pp_first_stage_blocks", 0, false}, {"parallel.pp_last_stage_blocks", 0, false},
  {"parallel.pp_trace_step", 0, false},
  {"data.seq_len", 0, false},
  {"optimizer.lr", 0, true},            {"optimizer.beta1", 0, false, 1, true},
  {"optimizer.beta2", 0, false, 1, true}, {"optimizer.eps", 0, true},     {"optimizer.weight_decay", 0, false},
  {"optimizer.grad_clip", 0, false},  {"optimizer.offload_threads", 0, false},
  {"schedule.warmup_steps", 0, false},  {"schedule.min_lr_ratio", 0, false, 1, false},
  {"schedule.decay_fraction", 0, false, 1, false},
  {"train.steps", 1, false},            {"train.micro_batch_size", 1, false}, {"train.grad_accum", 1, false},
  {"train.eval_every", 0, false},       {"train.eval_batches", 1, false},   {"train.sample_tokens", 0, false},
  {"train.sample_every", 0, false},
  {"train.threads", 0, false},         {"train.loss_chunk_mb", 0, false},  {"train.max_nonfinite_steps", 1, false},
  {"train.profile_steps", 0, false},   {"train.fp8_min_width", 0, false},   {"train.profile_start", 0, false},
  {"checkpoint.every", 0, false},       {"checkpoint.keep", 0, false},     {"checkpoint.memory_every", -1, false},
  {"logging.every", 1, false},          // the trainer computes step % every
  {"logging.straggler_threshold", 0, false},
  {"serve.port", 0, false, 65535, false}, {"serve.gpu_memory_fraction", 0, true, 1, false},
  {"serve.blocks", 0, false, kMaxCount, false}, {"serve.block_size", 1, false, kMaxCount, false},
  {"serve.max_running", 1, false, kMaxCount, false}, {"serve.max_waiting", 1, false, kMaxCount, false},
  {"serve.max_step_tokens", 1, false, kMaxCount, false}, {"serve.drain_timeout_s", 0, false},
};
// clang-format on

// Keys that must be given (strings that may not be empty), with what they hold.
const std::map<std::string_view, std::string_view> kRequired = {
    {"data.train", "a file or a glob of token shards"},
};

std::string num(double v) { return format_field_value(FieldValue(v)); }
std::string num(int64_t v) { return std::to_string(v); }

// "≥ 1", "> 0", "in [0, 1)".
std::string describe(const Bound& b, bool integral) {
  // Whole bounds print as integers ("in [0, 1)"), whatever the field's type.
  auto show = [&](double v) { return integral || v == std::floor(v) ? num(static_cast<int64_t>(v)) : num(v); };
  if (b.hi == kInf) return cat(b.lo_open ? "> " : "≥ ", show(b.lo));
  return cat("in ", b.lo_open ? "(" : "[", show(b.lo), ", ", show(b.hi), b.hi_open ? ")" : "]");
}

bool inside(const Bound& b, double v) {
  // Written so that NaN fails every bound.
  bool lo_ok = b.lo_open ? v > b.lo : v >= b.lo;
  bool hi_ok = b.hi == kInf ? !std::isnan(v) : (b.hi_open ? v < b.hi : v <= b.hi);
  return lo_ok && hi_ok;
}

std::string given(const FieldValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return cat("'", *s, "'");
  return format_field_value(v);
}

class Validator {
 public:
  Validator(const Config& cfg, int world_size)
      : cfg_(cfg), name_(cfg.source.empty() ? "config" : cfg.source), world_(world_size) {}

  void run() {
    check_tables();
    check_typed_values();
    for (const FieldInfo& f : config_fields()) check_field(f);
    check_model();
    check_data();
    check_parallel();
    check_checkpoint();
    check_cuda_graph();
    check_offload_delay();
  }

  // The serve section's rules alone: its bounds and its one typed value.
  void run_serve() {
    check_tables();
    for (const FieldInfo& f : config_fields())
      if (f.section == "serve") check_field(f);
    check_serve_body();
  }

 private:
  [[noreturn]] void fail(std::string_view path, const std::string& what) const {
    throw UserError(cat(name_, ": ", path, ": ", what));
  }

  void check_field(const FieldInfo& f) {
    FieldValue v = f.get(cfg_);
    std::string path = f.path();
    const auto empty = [&] {
      return f.type == FieldType::List ? std::get<StringList>(v).empty() : std::get<std::string>(v).empty();
    };
    if (auto it = kRequired.find(path); it != kRequired.end() && empty())
      fail(path, cat("required (", it->second, ")"));
    // Configs built in code skip the loader's parsing, which already refuses inf and nan.
    if (f.type == FieldType::Double && !std::isfinite(std::get<double>(v)))
      fail(path, cat("given ", given(v), "; valid a finite number"));
    for (const Bound& b : kBounds) {
      if (b.path != path) continue;
      double x = f.type == FieldType::Int ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
      if (!inside(b, x)) fail(path, cat("given ", given(v), "; valid ", describe(b, f.type == FieldType::Int)));
    }
  }

  // The preset's names live in the preset table (model_presets.cpp), not in an enumeration: it may be empty.
  void check_preset() {
    const std::string& p = cfg_.model.preset;
    const std::vector<std::string>& names = model_preset_names();
    if (p.empty() || std::find(names.begin(), names.end(), p) != names.end()) return;
    const std::string near = nearest_match(p, names);
    fail("model.preset", cat("given '", p, "'; valid ", join(names, " | "), ", or empty",
                             near.empty() ? "" : cat(" (did you mean '", near, "'?)")));
  }

  void check_model() {
    const ModelConfig& m = cfg_.model;
    check_preset();
    if (m.d_model % m.n_head != 0)
      fail("model.d_model", cat("given ", m.d_model, "; valid a multiple of model.n_head (", m.n_head, "): ",
                                m.d_model, " % ", m.n_head, " = ", m.d_model % m.n_head));
    if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
      fail("model.n_kv_head", cat("given ", m.n_kv_head, "; valid a divisor of model.n_head (", m.n_head, "): ",
                                  m.n_head, " % ", m.n_kv_head, " = ", m.n_head % m.n_kv_head));
    // RoPE rotates pairs of channels, so a llama head needs an even number of them.
    if (m.family == Family::llama && (m.d_model / m.n_head) % 2 != 0)
      fail("model.d_model", cat("given ", m.d_model, "; valid a head size d_model / n_head that is even for RoPE: ",
                                m.d_model, " / ", m.n_head, " = ", m.d_model / m.n_head));
    for (auto [key, id] : {std::pair{"model.bos_token_id", m.bos_token_id}, std::pair{"model.eos_token_id", m.eos_token_id}})
      if (id >= m.vocab_size)
        fail(key, cat("given ", id, "; valid -1 (none) or an id below model.vocab_size (", m.vocab_size, ")"));
    check_lora(m);
    check_base_quant();
    // Sizes LibTorch could not even count (the device's memory is checked where the device is known).
    check_model_sizes(cfg_);
  }

  // LoRA (docs/lora.md): rank 0 is off; the adapters wrap Llama's separate projections (GPT-2 fuses q/k/v
  // into one weight, which PEFT's layout does not name, so it is refused rather than mapped half-way).
  void check_lora(const ModelConfig& m) {
    if (m.lora_rank < 0)
      fail("model.lora_rank", cat("given ", m.lora_rank, "; valid > 0 (the adapters' rank) or 0 (LoRA off)"));
    if (m.lora_rank == 0) return;
    if (m.family != Family::llama)
      fail("model.lora_rank", cat("given ", m.lora_rank, " with model.family '", m.family,
                                  "'; valid LoRA on family llama only (or lora_rank 0)"));
    if (!(m.lora_alpha > 0.0))
      fail("model.lora_alpha", cat("given ", m.lora_alpha, "; valid > 0"));
    if (!(m.lora_dropout >= 0.0 && m.lora_dropout < 1.0))
      fail("model.lora_dropout", cat("given ", m.lora_dropout, "; valid 0 ≤ p < 1"));
    check_lora_rank(m);
  }

  // model.base_quant nf4 (QLoRA, docs/lora.md): a frozen base is what it quantizes, and tensor or pipeline
  // parallelism would cut or move the base's linears, which the NF4 path does not yet follow.
  void check_base_quant() {
    const ModelConfig& m = cfg_.model;
    if (m.base_quant == BaseQuant::none) return;
    if (m.lora_rank == 0)
      fail("model.base_quant", cat("given ", m.base_quant, " with model.lora_rank 0; valid none, or nf4 with "
                                   "model.lora_rank > 0 (QLoRA: only a frozen LoRA base is quantized)"));
    const ParallelConfig& p = cfg_.parallel;
    if (p.tp > 1 || p.pp > 1)
      fail("model.base_quant", cat("given ", m.base_quant, " with parallel.", p.tp > 1 ? "tp " : "pp ",
                                   p.tp > 1 ? p.tp : p.pp, "; valid nf4 with tp 1 and pp 1 (DDP, FSDP or one "
                                   "process), or none"));
  }

  // A rank above min(in, out) of an adapted projection gives its adapters more parameters than the projection
  // and nothing it could not already express — a typo, and at 2^40 an allocation LibTorch cannot even size.
  // Checked on the config's numbers before anything is allocated (as check_model_sizes does for the model).
  void check_lora_rank(const ModelConfig& m) {
    const int64_t head = m.d_model / m.n_head, kv = (m.n_kv_head > 0 ? m.n_kv_head : m.n_head) * head;
    // d_ff 0 is derived from d_model (≥ d_model for both families), so only a given one can be the smaller side.
    const int64_t ff = m.d_ff > 0 ? std::min(m.d_ff, m.d_model) : m.d_model;
    int64_t limit = std::numeric_limits<int64_t>::max();
    std::string where;
    for (LoraTarget t : lora_targets(m)) {
      const bool attn_kv = t == LoraTarget::k || t == LoraTarget::v;
      const bool mlp = t == LoraTarget::gate || t == LoraTarget::up || t == LoraTarget::down;
      const int64_t side = attn_kv ? std::min(kv, m.d_model) : mlp ? ff : m.d_model;
      if (side < limit) {
        limit = side;
        where = cat(t);
      }
    }
    if (m.lora_rank > limit)
      fail("model.lora_rank", cat("given ", m.lora_rank, "; valid 1 to ", limit, ": at most min(in, out) of every "
                                  "adapted projection (", where, " is the smallest, with model.d_model ", m.d_model,
                                  m.d_ff > 0 ? cat(", model.d_ff ", m.d_ff) : std::string(), ")"));
  }

  // train.cuda_graph: on replays one captured forward + backward; what the config alone shows cannot be in it
  // (the layout, the device and the data are asked at start-up: train/cuda_graph_step.h).
  void check_cuda_graph() {
    if (cfg_.train.cuda_graph == OnOff::off) return;
    const auto refuse = [&](const std::string& given, const std::string& why) {
      fail("train.cuda_graph", cat("given on with ", given, "; valid off, or on without it (", why, ")"));
    };
    const TrainConfig& t = cfg_.train;
    const ModelConfig& m = cfg_.model;
    if (t.device == TrainDevice::cpu) refuse("train.device cpu", "CUDA graphs need a CUDA device");
    if (cfg_.optimizer.offload != OptimizerOffload::none)
      refuse(cat("optimizer.offload ", cfg_.optimizer.offload), "the offloaded update moves gradients to the host");
    if (m.dropout > 0 || (m.lora_rank > 0 && m.lora_dropout > 0))
      refuse(cat(m.dropout > 0 ? "model.dropout " : "model.lora_dropout ", m.dropout > 0 ? m.dropout : m.lora_dropout),
             "a replay would draw the same dropout masks every time");
    if (t.activation_checkpointing)
      refuse("train.activation_checkpointing true", "the recomputation saves and restores the generator on the host");
  }

  // optimizer.offload_delay: the delayed update is a mode of the host optimizer, so it needs one.
  void check_offload_delay() {
    const OptimizerConfig& o = cfg_.optimizer;
    if (o.offload_delay != 0 && o.offload_delay != 1)
      fail("optimizer.offload_delay", cat("given ", o.offload_delay, "; valid 0 | 1"));
    if (o.offload_delay == 1 && o.offload != OptimizerOffload::cpu)
      fail("optimizer.offload_delay", cat("given 1 with optimizer.offload '", o.offload,
                                          "'; valid 0, or 1 with optimizer.offload cpu"));
  }

  void check_data() {
    const int64_t seq = cfg_.data.seq_len, max = cfg_.model.max_seq_len;
    if (seq > max) fail("data.seq_len", cat("given ", seq, "; valid ≤ model.max_seq_len (", max, ")"));
    validate_data_sources(cfg_.data.train, name_ + ": ", "data.train", /*weights_allowed=*/true);
    validate_data_sources(cfg_.data.val, name_ + ": ", "data.val", /*weights_allowed=*/false);
  }

  void check_checkpoint() {
    const CheckpointConfig& c = cfg_.checkpoint;
    // auto with init_from is the fine-tuning pattern (init first, resume after a restart); an explicit resume
    // path would make init_from dead — except under LoRA, where a checkpoint holds only the adapters and
    // init_from names the frozen base it is read over (docs/lora.md "Checkpoints").
    if (!c.init_from.empty() && c.resume != "none" && c.resume != "auto" && cfg_.model.lora_rank == 0)
      fail("checkpoint.init_from", cat("given '", c.init_from, "' with checkpoint.resume '", c.resume,
                                       "'; valid with resume none or auto (a resumed run already has its weights), "
                                       "or under LoRA (model.lora_rank > 0: init_from is the frozen base)"));
  }

  // train.freeze: globs, none empty (a trailing comma in the one-string form leaves one empty).
  void check_freeze() {
    const StringList& globs = cfg_.train.freeze;
    if (std::find(globs.begin(), globs.end(), "") != globs.end())
      fail("train.freeze", cat("given ", format_field_value(globs), "; valid globs over parameter names, none "
                               "empty (e.g. [blocks.0.*, tok_embed.weight] or blocks.0.*,tok_embed.weight)"));
  }

  // A misspelt path in the tables above would silently drop its rule: a bug, caught on first use.
  static void check_tables() {
    static const bool tables_ok = [] {
      for (const Bound& b : kBounds)
        MT_CHECK(find_config_field(b.path.substr(0, b.path.find('.')), b.path.substr(b.path.find('.') + 1)),
                 "validation bound for unknown field ", b.path);
      return true;
    }();
    (void)tables_ok;
  }

  // serve.max_body is a size as people type it ("8M"): the parser's rule, named with the file.
  void check_serve_body() const {
    try {
      (void)parse_bytes("serve.max_body", cfg_.serve.max_body);
    } catch (const UserError& e) {
      throw UserError(cat(name_, ": ", e.what()));
    }
  }

  // Lists and pairs that consumers take item by item (core/config_enums.h, core/nccl_env.h): their own rules,
  // reported with the file name like every other rule here.
  void check_typed_values() {
    check_freeze();
    check_serve_body();
    try {
      (void)lora_targets(cfg_.model);
      (void)parse_nccl_env(cfg_.comm.nccl_env, "comm.nccl_env");
    } catch (const UserError& e) {
      throw UserError(cat(name_, ": ", e.what()));
    }
  }

  // Runs rules that live with what they govern (the mesh shape: core/mesh_shape.h) and reports their UserError
  // with the file name, like every rule here.
  template <typename Rules>
  void with_file_name(Rules rules) const {
    try {
      rules();
    } catch (const UserError& e) {
      throw UserError(cat(name_, ": ", e.what()));
    }
  }

  void check_parallel() {
    const ParallelConfig& p = cfg_.parallel;
    with_file_name([&] { (void)MeshShape::parse_order(p.order); });

    check_tensor_parallel();

    if (p.fsdp > 1 && (p.zero_stage == 1 || p.zero_stage == 2))
      fail("parallel.zero_stage", cat("given ", p.zero_stage, " with parallel.fsdp ", p.fsdp,
                                      "; valid 0 or 3 (fsdp > 1 shards parameters, gradients and optimizer state)"));
    check_pipeline();

    if (world_ >= 1) with_file_name([&] { (void)MeshShape::from_config(p, world_); });
  }

  // What tensor parallelism splits evenly over tp ranks (parallel/tp/tensor_parallel.h asserts it): heads,
  // the MLP's inner features, the vocabulary rows, and under sequence parallelism every sequence. Checked on
  // the resolved values (0 = derive it, as resolve() derives it).
  void check_tensor_parallel() {
    const int64_t tp = cfg_.parallel.tp;
    if (tp <= 1) return;
    Config r = cfg_;
    resolve(r, world_);
    const ModelConfig& m = r.model;
    const auto divides = [&](const char* key, int64_t value, const char* what) {
      if (value % tp != 0)
        fail("parallel.tp", cat("given ", tp, "; valid a divisor of ", key, " (", value, "): ", value, " % ", tp,
                                " = ", value % tp, what));
    };
    divides("model.n_head", m.n_head, "");
    divides("model.n_kv_head", m.n_kv_head > 0 ? m.n_kv_head : m.n_head, "");
    divides("model.d_ff", m.d_ff, " (the MLP's inner features are split evenly over the tensor-parallel ranks)");
    if (m.vocab_size < tp)
      fail("parallel.tp", cat("given ", tp, "; valid at most model.vocab_size (", m.vocab_size,
                              "): every tensor-parallel rank holds at least one vocabulary row"));
    if (m.dropout > 0.0)
      fail("model.dropout", cat("given ", m.dropout, " with parallel.tp ", tp, "; valid 0 (dropout is not supported "
                                "under tensor parallelism)"));
    if (r.parallel.sequence_parallel && r.data.seq_len > 0)
      divides("data.seq_len", r.data.seq_len, " (sequence parallelism splits every sequence evenly)");
  }

  // Pipeline keys: checked on the resolved values (0 = derive it, as resolve() derives it).
  void check_pipeline() {
    Config r = cfg_;
    resolve(r, world_);
    const ParallelConfig& p = r.parallel;
    const ModelConfig& m = r.model;
    const bool interleaved = p.pp_schedule == PipelineKind::interleaved_1f1b;
    if (interleaved && p.pp_virtual_stages < 2)
      fail("parallel.pp_virtual_stages", cat("given ", p.pp_virtual_stages, " with pp_schedule interleaved-1f1b; ",
                                             "valid ≥ 2 (or 0 = 2)"));
    if (!interleaved && p.pp_virtual_stages != 1)
      fail("parallel.pp_virtual_stages", cat("given ", p.pp_virtual_stages, " with pp_schedule ", p.pp_schedule,
                                             "; valid 1 (or 0); model chunks need pp_schedule interleaved-1f1b"));
    if (p.pp == 1) return;
    const int64_t stages = p.pp * p.pp_virtual_stages;
    if (m.n_layer < stages)
      fail("parallel.pp", cat("given ", p.pp, " × pp_virtual_stages ", p.pp_virtual_stages, " = ", stages,
                              " stages; valid at most model.n_layer (", m.n_layer, "): one block per stage at least"));
    if (p.pp_first_stage_blocks + p.pp_last_stage_blocks > 0 && p.pp_virtual_stages > 1)
      fail("parallel.pp_first_stage_blocks", "given with pp_virtual_stages > 1; valid 0 (interleaved stages are even)");
    const int64_t fixed = p.pp_first_stage_blocks + p.pp_last_stage_blocks;
    const int64_t named = (p.pp_first_stage_blocks > 0) + (p.pp_last_stage_blocks > 0);
    if (fixed > 0 && m.n_layer - fixed < p.pp - named)
      fail("parallel.pp_first_stage_blocks", cat("first ", p.pp_first_stage_blocks, " + last ",
                                                 p.pp_last_stage_blocks, " blocks leave ", m.n_layer - fixed,
                                                 " of model.n_layer ", m.n_layer, " for ", p.pp - named,
                                                 " other stages; valid at least one block each"));
    const int64_t batch = r.train.micro_batch_size * r.train.grad_accum;
    const int64_t mb = p.pp_microbatches;
    if (mb == 0)
      fail("parallel.pp_microbatches", cat("no valid default for the batch train.micro_batch_size(",
                                           r.train.micro_batch_size, ") × train.grad_accum(", r.train.grad_accum,
                                           ") = ", batch, " and pp ", p.pp, "; valid a divisor of ", batch,
                                           interleaved ? " that is a multiple of pp" : "", " (≥ pp)"));
    if (batch % mb != 0)
      fail("parallel.pp_microbatches", cat("given ", mb, "; valid a divisor of the batch train.micro_batch_size(",
                                           r.train.micro_batch_size, ") × train.grad_accum(", r.train.grad_accum,
                                           ") = ", batch, ": ", batch, " % ", mb, " = ", batch % mb));
    if (interleaved && mb % p.pp != 0)
      fail("parallel.pp_microbatches", cat("given ", mb, " with interleaved-1f1b; valid a multiple of pp(", p.pp,
                                           "): ", mb, " % ", p.pp, " = ", mb % p.pp));
    if (r.train.sample_tokens > 0)
      fail("train.sample_tokens", cat("given ", r.train.sample_tokens, " with parallel.pp ", p.pp,
                                      "; valid 0 (generation runs the whole model in one process)"));
  }

  const Config& cfg_;
  std::string name_;
  int world_;
};

}  // namespace

void validate(const Config& cfg, int world_size) { Validator(cfg, world_size).run(); }

void validate_serve(const Config& cfg) { Validator(cfg, 0).run_serve(); }

}  // namespace meshtrain
