// parallel_worker: trains a tiny transformer for a few steps under one layout and writes (rank 0) the losses,
// the first step's global gradient norm (before clipping) and the final whole parameters, or compares them with a reference file written by a single-process run.
// Started once per rank by meshrun (CPU backend, fp32). Tier 3 of docs/architecture.md: each layout vs the
// single process, within a stated tolerance.
//
//   parallel_worker --layout single|ddp|zero1|zero2|fsdp|hsdp [--fsdp N] [--tp N [--sp]] [--tp-model]
//                   [--steps N] [--accum A] [--ac] [--no-reshard] [--family gpt2|llama] [--bf16-reduce]
//                   [--device cpu|cuda [--bf16]] [--freeze-half] [--offload] [--lora [--lora-dropout P]]
//                   (--out FILE | --compare FILE)
//   --device cuda: the model and its tensors on the GPU, cuda:(local rank mod GPUs), so several ranks may
//           share one GPU; the CPU backend stages the GPU tensors through host memory. Exits 77 (skipped)
//           without a CUDA device.
//   parallel_worker --probe-cuda            exits 0 where a CUDA device is visible, else 77 (run before
//                                           meshrun starts the ranks of a GPU test)
//   --tp N: tensor parallelism over N ranks under the layout (ddp: DDP over world / N TP-sharded replicas, a
//           plain TP model when N = world; fsdp: FSDP over world / N ranks of each TP block); --sp: sequence
//           parallelism. --tp-model: the model TP 2 and 4 can split (8 query / 4 key-value heads, d_ff 64),
//           for the TP layouts and their single-process reference alike.
//   --pp N [--schedule gpipe|1f1b|interleaved-1f1b|zb-h1] [--microbatches M]: pipeline parallelism over N
//           stages (parallel.pp_*), the layout inside each stage; --pp-model: 8 blocks and untied embeddings
//           (a pipeline's first and last stage hold them), for the pipeline layouts and their reference alike;
//           --tie keeps them tied (the last stage holds a copy, which must end equal to the first stage's).
//           Every rank walks the whole model's parameter names when assembling (a stage holds some only).
//           Each rank also checks its measured peak of live activations against its schedule's (1F1B and
//           ZB-H1 hold at most pp micro-batches on stage 0, GPipe all m; interleaving counts chunk pieces, whose
//           bound is the schedule's) and the Chrome trace of step 2 it
//           wrote (one event per action), and prints its measured bubble beside (pp − 1)/(m + pp − 1).
//   --packed: every row packs documents of 1 to 8 tokens (positions restart at each; model/documents.h), the
//           micro-batches carry them. --masked: targets masked as instruction data masks them — a prompt of 0 to
//           10 tokens per row, with --packed also every target that crosses into the next document, and rows 2
//           and 3 of the step wholly (a pipeline micro-batch without a target) — and each micro-batch weighted by
//           its share of the step's unmasked targets, as the trainer weighs them (TrainingRun::step_micro_batches).
//   --offload: optimizer.offload cpu (train/offloaded_adamw.h): fp32 master and moments in host memory, the
//           clip coefficient applied inside the host update; compared with the on-device optimizer's reference.
//   --freeze-half: train.freeze "blocks.1.*,blocks.2.attn.*" (a whole block and half of another: 1.5 of the
//           3 blocks); the frozen parameters must end bit-identical to their initial values, on every layout.
//   --lora: LoRA rank 4 on all seven projections (llama; model.lora_*): the base is frozen and must end
//           bit-identical, only the adapters train (a lr large enough that B moves off zero and A with it).
//   --bf16: train.dtype bf16 (autocast, the fp32 masters' weight gradients from the GEMMs) on the GPU, held to
//           the bf16 bound (tolerance()); without it every layout runs in fp32.
//   --nf4: model.base_quant nf4 (with --lora: QLoRA, docs/lora.md): the block linears held in NF4 outside the
//           parameters — whole on every rank under DDP, by rows of 256 quantization blocks under FSDP — on a wider
//           model (d_model 256, d_ff 512: every weight 2 to 8 rows of 16384 values, so FSDP 2 splits each in
//           halves); --check-plan counts their bytes (Nf4Tensor::bytes; FSDP: its held shards, FullyShard::
//           held_shard_bytes, + each weight's map and offset) with the frozen ones, and under FSDP fails unless
//           a rank holds 1/W of the NF4 rows.
//   --lora-dropout P: model.lora_dropout P (with --lora). Ranks draw the adapters' dropout masks from their
//           default generators, seeded alike in every process (train.seed, as the trainer does), so a layout
//           whose ranks see the single process's micro-batches in its order (TP alone) drops what it drops.
//   --check-plan: after the last step's optimizer update, each rank sums the bytes of the storages it holds —
//           module parameters, master shards, gradients, AdamW state — and compares them, item by item and
//           exactly, with the planner's count for its (tp, shard) coordinate (plan/rank_state.h); FAIL on any
//           difference.
//   parallel_worker --layout ddp --desync   the last rank skips one gradient reduction: the others must fail
//                                           with the communicator's timeout error within the timeout
//
// Data: every step draws G = 8 sequences from a generator seeded by the step; they are cut into
// D × accum equal chunks (D = data-parallel ranks = world / tp), chunk (d·accum + micro) being one
// micro-batch of data-parallel rank d — the same on every TP rank of d's group. The mean of the chunk means
// is the mean over all G, so every layout optimises the same loss as the single process.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/mesh_shape.h"
#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/documents.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/nf4_base.h"
#include "meshtrain/model/nf4_tensor.h"
#include "meshtrain/parallel/fsdp/sharded_model.h"
#include "meshtrain/parallel/full_tensor.h"
#include "meshtrain/parallel/parallelize.h"
#include "meshtrain/plan/rank_state.h"
#include "meshtrain/parallel/pipeline/pipeline_model.h"
#include "meshtrain/train/optimizer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

struct Args {
  std::string layout = "single", family = "gpt2", device = "cpu", out, compare;
  std::string schedule = "1f1b";
  int64_t fsdp = 2, tp = 1, pp = 1, microbatches = 0, steps = 5, accum = 1;
  double lora_dropout = 0.0;
  bool ac = false, reshard = true, desync = false, bf16_reduce = false, sp = false, tp_model = false,
       freeze_half = false, check_plan = false, pp_model = false, offload = false, lora = false, bf16 = false,
       tie = false, packed = false, masked = false, nf4 = false;
};

constexpr int64_t kGlobalBatch = 8, kSeq = 16;

Config make_config(const Args& a, int world) {
  Config c;
  c.source = "parallel_worker";
  // vocab 67: rows not divisible by 2, 4, so shards are padded. gpt2 ties its embeddings, llama does not.
  c.model = testing_support::tiny_model({.family = a.family, .vocab_size = 67, .n_layer = 3, .n_head = 2,
                                         .n_kv_head = a.family == "llama" ? 1 : 0, .d_model = 24,
                                         .max_seq_len = kSeq});
  if (a.tp_model) {  // vocab 67 still splits unevenly (33/34, 16/17 rows), and FSDP then chunks those blocks
    c.model.d_model = 32;
    c.model.n_head = 8;
    c.model.n_kv_head = a.family == "llama" ? 4 : 8;
    c.model.d_ff = 64;
  }
  if (a.nf4) {  // weights of whole NF4 rows (16384 values), several each: FSDP shards them evenly
    c.model.d_model = 256;
    c.model.n_head = 2;
    c.model.n_kv_head = 1;
    c.model.d_ff = 512;
  }
  if (a.pp_model) {
    c.model.n_layer = 8;
    c.model.tie_embeddings = a.tie;
  }
  c.data.train = {"unused"};
  c.train.seed = 1234;
  // fp32 unless --bf16: the tolerances below are for fp32 products (train.dtype auto would be bf16 on the GPU).
  c.train.dtype = a.bf16 ? ComputeDtype::bf16 : ComputeDtype::fp32;
  c.train.activation_checkpointing = a.ac;
  if (a.freeze_half) c.train.freeze = {"blocks.1.*", "blocks.2.attn.*"};
  if (a.offload) c.optimizer.offload = OptimizerOffload::cpu;
  if (a.lora) {
    c.model.lora_rank = 4;
    c.model.lora_alpha = 8.0;
    c.model.lora_targets = {"q", "k", "v", "o", "gate", "up", "down"};
    c.model.lora_dropout = a.lora_dropout;
    if (a.nf4) c.model.base_quant = BaseQuant::nf4;
  }
  c.parallel.tp = a.tp;
  c.parallel.sequence_parallel = a.sp;
  c.parallel.pp = a.pp;
  c.parallel.pp_schedule = parse_enum<PipelineKind>(a.schedule, "--schedule");
  c.parallel.pp_microbatches = a.microbatches;
  c.parallel.fsdp = a.layout == "fsdp" ? world / (a.tp * a.pp) : a.layout == "hsdp" ? a.fsdp : 1;
  // The batch as the config sees it (pp_microbatches must divide it): this replica's rows per micro-batch.
  c.train.grad_accum = a.accum;
  c.train.micro_batch_size = kGlobalBatch / (world / (a.tp * a.pp)) / a.accum;
  c.parallel.zero_stage = a.layout == "zero1" ? 1 : a.layout == "zero2" ? 2 : 0;
  c.parallel.fsdp_reshard_after_forward = a.reshard;
  c.parallel.reduce_dtype = a.bf16_reduce ? Dtype::bf16 : Dtype::fp32;
  c.parallel.bucket_mb = 0.01;  // several buckets even for a tiny model
  c.parallel.bucket_first_mb = 0.002;
  c.parallel.pp_trace_step = a.pp > 1 ? 2 : 0;
  c.train.out_dir = (std::filesystem::temp_directory_path() / ("meshtrain_pp_worker_" + std::to_string(getpid())))
                        .string();
  c.optimizer.lr = 1e-2;
  c.optimizer.grad_clip = 0.5;  // clipping active: the global norm must be right across shards
  resolve(c, world);
  validate(c, world);
  return c;
}

at::Tensor step_tokens(int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(1000 + step));
  return at::randint(67, {kGlobalBatch, kSeq + 1}, gen, at::TensorOptions().dtype(at::kLong));
}

// The step's rows as --packed and --masked make them (host tensors, every rank alike): positions [G, T]
// restarting at each document (undefined unless packed) and the targets with -100 where masked.
struct StepRows {
  at::Tensor inputs, targets, positions;
  bool masked = false;
};

StepRows step_rows(const Args& a, int64_t step) {
  const at::Tensor seq = step_tokens(step);
  StepRows r{seq.narrow(1, 0, kSeq), seq.narrow(1, 1, kSeq).clone(), {}, a.masked};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(2000 + step));
  const auto draw = [&](int64_t lo, int64_t hi) {
    return at::randint(lo, hi + 1, {1}, gen, at::kLong).item<int64_t>();
  };
  if (a.packed) {
    r.positions = at::zeros({kGlobalBatch, kSeq}, at::kLong);
    for (int64_t row = 0; row < kGlobalBatch; ++row)
      for (int64_t t = 0; t < kSeq;)
        for (int64_t len = draw(1, 8), i = 0; i < len && t < kSeq; ++i, ++t) r.positions[row][t] = i;
  }
  if (!a.masked) return r;
  for (int64_t row = 0; row < kGlobalBatch; ++row) {
    r.targets[row].narrow(0, 0, draw(0, 10)).fill_(-100);  // the prompt
    if (row == 2 || row == 3) r.targets[row].fill_(-100);
    for (int64_t t = 0; a.packed && t + 1 < kSeq; ++t)
      if (r.positions[row][t + 1].item<int64_t>() == 0) r.targets[row][t] = -100;  // into the next document
  }
  return r;
}

// One micro-batch of `rows` of the step (on `device`), weighted as the trainer weighs masked data: its
// unmasked targets × data ranks / the step's.
parallel::ParallelModel::MicroBatch micro_batch(const StepRows& r, int64_t first, int64_t rows, int64_t data_ranks,
                                                const at::Device& device) {
  parallel::ParallelModel::MicroBatch b{r.inputs.narrow(0, first, rows).to(device),
                                        r.targets.narrow(0, first, rows).to(device)};
  if (r.positions.defined())
    b.docs = model::documents_from_positions(r.positions.narrow(0, first, rows).contiguous().to(device));
  if (r.masked) {
    const int64_t unmasked = r.targets.ne(-100).sum().item<int64_t>();
    const int64_t mine = r.targets.narrow(0, first, rows).ne(-100).sum().item<int64_t>();
    b.loss_weight = static_cast<double>(mine * data_ranks) / static_cast<double>(unmasked);
  }
  return b;
}

// On the GPU every product stays an fp32 one (math attention, no TF32 in cuBLAS or cuDNN), so that the layouts
// are compared in fp32 arithmetic whatever kernels a future version would pick for fp32 inputs. (On the H200
// this changed nothing measurable; the gap that remains is explained at tolerance().)
void use_fp32_kernels_only() {
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(false);
  ctx.setSDPUseMemEfficient(false);
  ctx.setSDPUseCuDNN(false);
  ctx.setSDPUseMath(true);
  ctx.setAllowTF32CuBLAS(false);
  ctx.setAllowTF32CuDNN(false);
}

struct Tolerance {
  double loss_rtol, atol, rtol;  // losses: relative; parameters: |diff| ≤ atol + rtol × |ref|
};

// fp32 on the CPU: reductions in a different order differ in the last bits, and Adam, which divides by the
// gradient's own scale, amplifies them (most for gpt2's key biases, whose true gradient is 0): ≈1.3e-5 seen.
// A wrong reduction shows at 1e-3 and above.
// bf16 reduction rounds gradients to 8 bits of mantissa; Adam's update is ±lr-bounded per element whatever
// the gradient's size, so near-zero gradients can flip sign: parameters then agree only within a few lr
// (5 steps × 1e-2), and the losses — which see the whole model — within 1e-3.
// fp32 on one GPU (the reference runs the ranks' micro-batches, so every kernel sees the same shapes): DDP
// matches bit for bit and every data-parallel layout's losses within the CPU's 1e-5. ZeRO, FSDP and HSDP sum
// the clip's global norm over shards in another order; its last bit moves the clip divisor inside AdamW's
// kernel and with it every update's last bits, which Adam grows on the key biases (H200: 6.6e-6 ZeRO 1 and 2,
// 2.0e-6 FSDP 2, 1.1e-5 HSDP 2×2). Tensor parallelism splits the matmuls themselves, so cuBLAS sums over
// other shapes (H200: parameters within 1.8e-5), and pipelines add the stages' norms over pp (within 2.3e-5,
// PP 2 × FSDP 2 × TP 2). Those layouts keep the wider bounds below, set when these runs were (unintended) bf16:
// a lost or doubled micro-batch changes a rank's gradient by half, far beyond either.
// --bf16 (autocast and the trainer's kernels, as it runs on a GPU): on the H200 DDP, FSDP and the pipeline
// matched bit for bit and ZeRO 2 within 1.5e-8; held to the bf16 bound, which any bf16 reduction order keeps.
// Offload on one GPU (the streamed layout holds parameters of its own making): the step-1 loss, before any
// update, is already 3.6e-6 (single) and 1.8e-5 (DDP 2) apart on the H200 — the forward's kernels differ, not
// the update — and Adam grows it over 5 steps to losses 3e-4 and parameters 4.3e-2 apart: the bf16 bound. On
// the CPU the same tests hold the 5e-5 bound, which checks the streamed accumulation itself.
Tolerance tolerance(const Args& a) {
  if (a.bf16_reduce || a.bf16 || (a.device == "cuda" && (a.tp > 1 || a.offload))) return {1e-3, 5e-2, 0};
  if (a.device == "cuda" && (a.pp > 1 || a.layout == "fsdp")) return {1e-4, 3e-2, 1e-4};
  if (a.device == "cuda") return {1e-5, 1e-2, 1e-4};
  return {1e-5, 5e-5, 1e-4};
}

// Bytes of distinct storages, each counted once across every item it is added to (views share a storage).
struct StorageBytes {
  std::set<const void*> seen;
  int64_t add(const at::Tensor& t) {
    if (!t.defined()) return 0;
    auto* impl = t.storage().unsafeGetStorageImpl();
    return seen.insert(impl).second ? static_cast<int64_t>(impl->nbytes()) : 0;
  }
};

// This rank's state as it holds it vs plan::rank_state for its coordinate; prints both, 0 when equal.
int check_plan(const parallel::ParallelModel& par, const train::Optimizer& opt, const Config& cfg,
               const MeshShape& shape, int rank, int world) {
  const plan::RankLayout l = plan::RankLayout::from(cfg, world);
  const int64_t tp_rank = shape.index_in_group(rank, {Dim::tp});
  const int64_t shard_rank = l.shard > 1 ? shape.index_in_group(rank, {l.fsdp > 1 ? Dim::fsdp : Dim::dp}) : 0;
  const plan::RankState want = plan::rank_state(cfg, world, tp_rank, shard_rank);
  StorageBytes seen;
  plan::RankState got;
  const auto shards = par.sharded_parameters();
  auto module = par.net()->parameters();
  // Replicated layouts: the module's parameters are the master copy (counted as parameters); sharded: the
  // shards are the master and the module's gathered copies (none when aliased to the shards) the parameters —
  // unless the optimizer holds the master apart (streamed offload): then the shards it updates are parameters.
  if (l.zero_stage == 0) {
    for (const auto& p : module) got.params += seen.add(p);
  } else {
    for (const auto& s : shards) (opt.master_of(s.local).defined() ? got.params : got.master) += seen.add(s.local);
    for (const auto& p : module) got.params += seen.add(p);
  }
  for (const auto& p : module) got.grads += seen.add(p.grad());
  for (const auto& s : shards) got.grads += seen.add(s.local.grad());
  for (const auto& [name, t] : opt.state_tensors()) got.optimizer += seen.add(t);
  // QLoRA's NF4 weights, no parameters (the plan counts them as frozen): held whole by every rank, or under
  // FSDP this rank's shards of their rows beside each weight's map and offset.
  int64_t nf4 = 0, maps = 0, rows = 0;
  for (const auto& [name, lin] : model::nf4_base_linears(*par.net().ptr()))
    if (const model::Nf4Tensor* q = lin->nf4_weight()) {
      nf4 += q->bytes();
      maps += q->absmax_map.numel() * 4 + 4;
      rows += q->rows() * plan::kNf4RowBytes;
    }
  const auto* sharded = dynamic_cast<const parallel::ShardedModel*>(&par);
  if (const int64_t held = sharded ? sharded->fully_shard().held_shard_bytes() : 0; held > 0) {
    nf4 = held + maps;
    got.params += sharded->fully_shard().held_gathered_bytes();  // ZeRO-1/2 keep the rows gathered
    const bool half = held * l.shard == rows;  // the wider --nf4 model: every weight's rows split evenly
    std::printf("%s rank %d holds %lld bytes of NF4 rows of %lld (1/%lld)\n", half ? "nf4:" : "FAIL nf4:", rank,
                static_cast<long long>(held), static_cast<long long>(rows), static_cast<long long>(l.shard));
    if (!half) return 1;
  }
  // The shards held are the master shards and the frozen parameters' shards together (the plan counts them apart).
  const bool same = got.params == want.params && got.master + nf4 == want.master + want.frozen &&
                    got.grads == want.grads && got.optimizer == want.optimizer;
  std::printf("%s state bytes rank %d (tp %lld, shard %lld): params %lld (plan %lld), master %lld (plan %lld), "
              "grads %lld (plan %lld), optimizer %lld (plan %lld)\n",
              same ? "plan:" : "FAIL plan:", rank, static_cast<long long>(tp_rank), static_cast<long long>(shard_rank),
              static_cast<long long>(got.params), static_cast<long long>(want.params),
              static_cast<long long>(got.master + nf4), static_cast<long long>(want.master + want.frozen),
              static_cast<long long>(got.grads), static_cast<long long>(want.grads),
              static_cast<long long>(got.optimizer), static_cast<long long>(want.optimizer));
  return same ? 0 : 1;
}

// This rank's blocks of every parameter of the whole model, in the model's order: a pipeline stage holds
// some parameters only, and assembling is collective, so the ranks it lacks come as write-less empty blocks.
std::vector<ShardedTensor> every_parameter(const parallel::ParallelModel& par, const model::Transformer& net,
                                           const at::Device& device) {
  std::map<std::string, ShardedTensor> mine;
  for (auto& s : par.sharded_parameters()) mine[s.name] = s;
  bool all = true;
  for (const auto& item : net->named_parameters()) all = all && mine.count(item.key());
  if (all) return par.sharded_parameters();  // not a pipeline: this rank holds blocks of every parameter
  std::vector<ShardedTensor> out;
  for (const auto& item : net->named_parameters()) {
    auto it = mine.find(item.key());
    if (it != mine.end()) {
      out.push_back(it->second);
      continue;
    }
    const auto shape = item.value().sizes().vec();
    out.push_back({item.key(), shape, std::vector<int64_t>(shape.size(), 0),
                   at::empty({0}, at::TensorOptions().device(device).dtype(at::kFloat)), false});
  }
  return out;
}

// A pipeline rank's own checks: the executor's measured peak of live activations is its schedule's, within
// 1F1B's bound on stage 0 where GPipe holds every micro-batch; the trace of step 2 has one event per action.
int check_pipeline(const parallel::PipelineModel& pm, int world_rank) {
  const auto& s = pm.schedule();
  const int r = pm.rank();
  const int measured = pm.last_step().peak_live_activations;
  const int expected = parallel::simulate_pipeline(s).peak_in_flight[static_cast<size_t>(r)];
  int bad = 0;
  if (measured != expected) {
    std::fprintf(stderr, "FAIL stage %d held %d micro-batches of activations; its schedule holds %d\n", r, measured,
                 expected);
    ++bad;
  }
  // Interleaving counts chunk-sized pieces (1/v of a stage's layers each): its bound is the schedule's own.
  const bool gpipe = s.kind == parallel::PipelineKind::gpipe;
  const bool chunked = s.kind == parallel::PipelineKind::interleaved_1f1b;
  if (r == 0 && !chunked && (gpipe ? measured != s.microbatches : measured > s.pp)) {
    std::fprintf(stderr, "FAIL stage 0 held %d micro-batches of activations (%s, pp %d, m %d)\n", measured,
                 enum_c_str(s.kind), s.pp, s.microbatches);
    ++bad;
  }
  std::printf("rank %d: stage %d (%s, m %d) held at most %d micro-batch(es) of activations; measured bubble %.3f, "
              "the schedule's with F 1, B 2 (I 1, W 1) %.3f, (pp − 1)/(m + pp − 1) = %.3f\n", world_rank, r,
              enum_c_str(s.kind), s.microbatches, measured, pm.last_step().bubble,
              parallel::simulate_pipeline(s).bubble[static_cast<size_t>(r)],
              parallel::ideal_bubble_fraction(s.pp, s.microbatches));
  return bad;
}

int check_trace(const parallel::PipelineModel& pm, const std::string& out_dir, int world_rank) {
  const std::string path = out_dir + "/pipeline_trace/rank_" + std::to_string(world_rank) + ".json";
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t events = 0;
  for (size_t at = text.find("\"ph\": \"X\""); at != std::string::npos; at = text.find("\"ph\": \"X\"", at + 1))
    ++events;
  const size_t want = pm.schedule().ranks[static_cast<size_t>(pm.rank())].size();
  remove_tree(out_dir);  // core/fs.h: never std::filesystem::remove_all next to libtorch
  if (events == want) return 0;
  std::fprintf(stderr, "FAIL trace %s: %zu action events, the schedule has %zu\n", path.c_str(), events, want);
  return 1;
}

// Every block this rank holds of tok_embed.weight — a tied pipeline's last stage holds the head's copy, which
// no rank writes — equal, bit for bit, to the assembled weight (the first stage's blocks). `head_stage`: this
// rank must hold such a copy.
int check_tied_copies(const parallel::ParallelModel& par, const std::map<std::string, at::Tensor>& result, int rank,
                      bool head_stage) {
  int bad = 0, seen = 0;
  for (const auto& s : par.sharded_parameters()) {
    if (s.name != "tok_embed.weight" || s.write) continue;
    at::Tensor want = result.at("param." + s.name);
    for (int64_t d = 0; d < want.dim(); ++d) want = want.narrow(d, s.offsets[static_cast<size_t>(d)], s.local.size(d));
    const bool same = at::equal(want, s.local.detach().cpu());
    std::printf("%s rank %d: its unwritten copy of %s (%lld elements) %s the written one\n",
                same ? "tied:" : "FAIL tied:", rank, s.name.c_str(), static_cast<long long>(s.local.numel()),
                same ? "equals" : "differs from");
    bad += same ? 0 : 1;
    ++seen;
  }
  if (head_stage && seen == 0) {
    std::fprintf(stderr, "FAIL rank %d: the last stage holds no copy of tok_embed.weight\n", rank);
    ++bad;
  }
  return bad;
}

int compare(const std::map<std::string, at::Tensor>& got, const std::string& ref_path, const Tolerance& tol) {
  ckpt::SafetensorsReader ref(ref_path);
  const double loss_rtol = tol.loss_rtol, atol = tol.atol, rtol = tol.rtol;
  int bad = 0;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, t] : got) {
    auto want = ref.read(name).to(at::kDouble);
    auto g = t.to(at::kDouble);
    if (g.sizes() != want.sizes()) {
      std::fprintf(stderr, "FAIL %s: shape %s vs %s\n", name.c_str(), c10::str(g.sizes()).c_str(),
                   c10::str(want.sizes()).c_str());
      ++bad;
      continue;
    }
    const bool is_loss = name == "loss" || name == "grad_norm_step1";  // scalars: relative
    auto excess = ((g - want).abs() - (is_loss ? 0.0 : atol) - (is_loss ? loss_rtol : rtol) * want.abs()).max();
    const double e = excess.item<double>();
    const double diff = (g - want).abs().max().item<double>();
    if (diff > worst) worst = diff, worst_name = name;
    if (e > 0) {
      std::fprintf(stderr, "FAIL %s: max |diff| %.3g beyond tolerance\n", name.c_str(), diff);
      ++bad;
    }
  }
  std::printf("compared %zu tensors with %s: largest |diff| %.3g (%s); tolerance loss rtol %.0e, params atol %.0e "
              "+ rtol %.0e\n", got.size(), ref_path.c_str(), worst, worst_name.c_str(), loss_rtol, atol, rtol);
  std::printf(bad == 0 ? "PASS\n" : "FAIL: %d tensor(s) differ\n", bad);
  return bad == 0 ? 0 : 1;
}

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE

bool cuda_visible() { return at::hasCUDA() && at::getNumGPUs() > 0; }

// The CPU backend over `device`'s tensors (staged through host memory by the communicator when on a GPU).
comm::CommPtr make_world_comm(const comm::WorldInfo& world, const at::Device& device, bool desync) {
  if (world.world_size == 1) return nullptr;
  comm::CommSetup s;
  s.backend = CommBackend::cpu;
  s.device = device;
  s.timeout = std::chrono::milliseconds(desync ? 3000 : 60000);
  return comm::make_communicator(world, s);
}

int run(const Args& a) {
  const auto world = comm::world_info_from_env();
  log::init(log::Options{.rank = world.rank});
  at::set_num_threads(1);
  MT_USER_CHECK(a.device == "cpu" || a.device == "cuda", "parallel_worker: --device given '", a.device,
                "'; valid: cpu | cuda");
  if (a.device == "cuda" && !cuda_visible()) {
    std::printf("SKIP: no CUDA device visible\n");
    return kSkipped;
  }
  if (a.device == "cuda") use_fp32_kernels_only();
  const at::Device device = a.device == "cuda"
                                ? comm::rank_cuda_device(CommBackend::cpu, world.local_rank, static_cast<int>(at::getNumGPUs()))
                                : at::Device(at::kCPU);
  const auto timeout = std::chrono::milliseconds(a.desync ? 3000 : 60000);
  comm::CommPtr comm = make_world_comm(world, device, a.desync);
  const Config cfg = make_config(a, world.world_size);
  at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // as the trainer: every rank's default generator alike
  model::Transformer net(cfg.model, at::TensorOptions().device(at::kMeta));
  std::unique_ptr<comm::Mesh> mesh = comm ? std::make_unique<comm::Mesh>(cfg, comm) : nullptr;
  auto par = parallel::parallelize(net, mesh ? parallel::make_parallel_groups(*mesh) : parallel::ParallelGroups{}, cfg,
                                   device);
  net->use_kernels(cfg.train);  // as the trainer: the kernels train.* chooses (a pipeline's stages set their own)
  std::printf("rank %d: %s\n", world.rank, par->describe().c_str());
  const std::unique_ptr<train::Optimizer> opt = train::make_optimizer(*par, cfg.optimizer, cfg.train.grad_accum);

  // This rank's data-parallel index: its group along dp × fsdp (TP ranks of one group share it).
  const auto shape = MeshShape::from_config(cfg.parallel, world.world_size);
  comm::Communicator* gather = par->replicated() ? nullptr : comm.get();
  const auto policy = parallel::TrainablePolicy::from_config(cfg);
  std::map<std::string, at::Tensor> frozen_before;  // whole initial values of the frozen parameters
  for (const auto& s : every_parameter(*par, net, device))
    if (!policy.trains(s.name)) frozen_before[s.name] = parallel::assemble_full(s, gather).cpu().clone();
  const int64_t data_ranks = shape.size({Dim::dp, Dim::fsdp});
  const int64_t data_rank = shape.index_in_group(world.rank, {Dim::dp, Dim::fsdp});
  const int64_t chunks = data_ranks * a.accum, rows = kGlobalBatch / chunks;
  MT_CHECK(rows * chunks == kGlobalBatch, "batch ", kGlobalBatch, " not divisible into ", chunks, " chunks");
  std::vector<double> losses, norms;  // per step: the loss, the global gradient norm before clipping
  int plan_failed = 0;
  for (int64_t step = 0; step < a.steps; ++step) {
    const StepRows step_data = step_rows(a, step);
    std::vector<parallel::ParallelModel::MicroBatch> batches;
    for (int64_t m = 0; m < a.accum; ++m)
      batches.push_back(micro_batch(step_data, (data_rank * a.accum + m) * rows, rows, data_ranks, device));
    if (a.desync && step == 1 && world.rank == world.world_size - 1) {
      // This rank skips the gradient all-reduce the others are waiting in, then stays away past the timeout.
      auto loss = par->loss(batches[0].tokens, batches[0].targets);
      par->backward(loss, /*sync=*/false);
      std::this_thread::sleep_for(2 * timeout);
      return 0;
    }
    const double loss_sum = par->forward_backward(batches).item<double>() / static_cast<double>(a.accum);
    // As the trainer steps (train/optimizer.h): AdamW on the device takes the clip as a divisor in its kernel
    // (no step is skipped here: the losses are finite); an offloaded optimizer takes the clip coefficient.
    opt->gradients_ready();
    const double max_norm = cfg.optimizer.grad_clip;
    if (opt->steps_on_device()) {
      const at::Tensor norm = par->clip_grad_norm(0.0).to(device);
      norms.push_back(norm.item<double>());
      const at::Tensor divisor = train::clip_divisor(norm, max_norm);
      opt->device_step(cfg.optimizer.lr, divisor, at::zeros({}, at::TensorOptions(at::kFloat).device(device)));
    } else {
      const at::Tensor norm = par->clip_grad_norm(opt->scales_gradients() ? 0.0 : max_norm);
      norms.push_back(norm.item<double>());
      const double clip = opt->scales_gradients() ? at::clamp_max(max_norm / (norm.to(at::kFloat) + 1e-6), 1.0).item<double>() : 1.0;
      opt->step(cfg.optimizer.lr, clip);
    }
    // Gradients are still there until after_optimizer_step (the plain model drops them).
    // The planner's per-rank count does not split the model into pipeline stages yet (docs/plan.md).
    if (a.check_plan && a.pp == 1 && step + 1 == a.steps)
      plan_failed = check_plan(*par, *opt, cfg, shape, world.rank, world.world_size);
    par->after_optimizer_step();
    auto l = at::full({1}, loss_sum, at::kFloat);
    if (comm) comm->all_reduce(l, comm::ReduceOp::Avg)->wait();
    losses.push_back(static_cast<double>(l.item<float>()));
  }

  std::map<std::string, at::Tensor> result;
  int changed = 0;
  for (const auto& s : every_parameter(*par, net, device)) {
    result["param." + s.name] = parallel::assemble_full(s, gather).cpu().clone();
    if (frozen_before.count(s.name) && !at::equal(frozen_before[s.name], result["param." + s.name])) {
      std::fprintf(stderr, "FAIL frozen %s changed in training\n", s.name.c_str());
      ++changed;
    }
  }
  if ((a.freeze_half || a.lora) && world.rank == 0)
    std::printf("%zu frozen parameters, %d changed\n", frozen_before.size(), changed);
  result["loss"] = at::tensor(losses, at::kDouble);
  // The first step's norm only: before any update every layout sees the same parameters, so it agrees to the
  // reduction order (a norm counting some gradient twice or not at all does not); later steps' norms move with
  // the parameters' last bits, which Adam amplifies (the parameters are compared with their own tolerance).
  if (!norms.empty()) result["grad_norm_step1"] = at::tensor(std::vector<double>{norms.front()}, at::kDouble);
  if (a.tie) {
    const auto* pm = dynamic_cast<const parallel::PipelineModel*>(par.get());
    changed += check_tied_copies(*par, result, world.rank, pm && pm->rank() == pm->schedule().pp - 1);
  }
  if (const auto* pm = dynamic_cast<const parallel::PipelineModel*>(par.get())) {  // test-only: its schedule
    changed += check_pipeline(*pm, world.rank);
    changed += a.steps >= 2 ? check_trace(*pm, cfg.train.out_dir, world.rank) : 0;
  }
  if (comm) comm->barrier();
  if (world.rank != 0) return plan_failed != 0 || changed > 0 ? 1 : 0;
  std::printf("losses:");
  for (double l : losses) std::printf(" %.6f", l);
  std::printf("\ngradient norms:");
  for (double n : norms) std::printf(" %.7f", n);
  std::printf("\n");
  if (!a.out.empty()) ckpt::write_safetensors(a.out, result);
  if (changed > 0 || plan_failed) return 1;
  return a.compare.empty() ? 0 : compare(result, a.compare, tolerance(a));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(cat("parallel_worker: ", k, " needs a value"));
      return argv[++i];
    };
    try {
      if (k == "--layout") a.layout = next();
      else if (k == "--family") a.family = next();
      else if (k == "--fsdp") a.fsdp = std::stoll(next());
      else if (k == "--tp") a.tp = std::stoll(next());
      else if (k == "--sp") a.sp = true;
      else if (k == "--tp-model") a.tp_model = true;
      else if (k == "--pp") a.pp = std::stoll(next());
      else if (k == "--pp-model") a.pp_model = true;
      else if (k == "--tie") a.tie = true;
      else if (k == "--packed") a.packed = true;
      else if (k == "--masked") a.masked = true;
      else if (k == "--schedule") a.schedule = next();
      else if (k == "--microbatches") a.microbatches = std::stoll(next());
      else if (k == "--steps") a.steps = std::stoll(next());
      else if (k == "--accum") a.accum = std::stoll(next());
      else if (k == "--out") a.out = next();
      else if (k == "--compare") a.compare = next();
      else if (k == "--ac") a.ac = true;
      else if (k == "--no-reshard") a.reshard = false;
      else if (k == "--desync") a.desync = true;
      else if (k == "--bf16-reduce") a.bf16_reduce = true;
      else if (k == "--bf16") a.bf16 = true;
      else if (k == "--freeze-half") a.freeze_half = true;
      else if (k == "--offload") a.offload = true;
      else if (k == "--lora") a.lora = true;
      else if (k == "--lora-dropout") a.lora_dropout = std::stod(next());
      else if (k == "--nf4") a.nf4 = true;
      else if (k == "--check-plan") a.check_plan = true;
      else if (k == "--device") a.device = next();
      else if (k == "--probe-cuda") return cuda_visible() ? 0 : kSkipped;
      else throw UserError(cat("parallel_worker: unknown option '", k, "' (see the comment at the top of the file)"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }
  try {
    return run(a);
  } catch (const UserError& e) {
    std::fprintf(stderr, "parallel_worker: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parallel_worker: error: %s\n", e.what());
    return 1;
  }
}
