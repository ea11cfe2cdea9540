// The run configuration: one schema for YAML and JSON files (chosen by extension), ten sections.
//
// Each section is declared once, as an X-macro table of (type, key, default, doc). The table generates the
// plain struct below and the reflection used by the loader (unknown-key detection with suggestions, `--set`
// overrides, printing the resolved config) and by `meshtrain config --docs`, which writes docs/config.md.
// Adding a field = one line here (+ its validation rule in config_validate.cpp, if it has one).
//
// Types: int64_t, double, bool, std::string; a closed enumeration of core/config_enums.h (its valid spellings
// come from there: the loader refuses any other, docs/config.md lists them); StringList, written as a YAML
// sequence or JSON array, or as one comma-separated string (what older files and checkpoints hold).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain {

// A list-valued key (train.freeze, model.lora_targets, data.train).
using StringList = std::vector<std::string>;

// clang-format off
#define MT_MODEL_FIELDS(F)                                                                                   \
  F(std::string, preset, "", "Named shape that fills the fields below before the file's own values apply; "     \
    "one of: tiny | gpt2-124m | gpt2-350m | gpt2-774m | gpt2-1.5b | llama3.2-1b | llama3.2-3b | llama3.1-8b | "  \
    "llama3.1-70b, or empty")                                                                                 \
  F(Family, family, Family::gpt2, "Architecture family")                                  \
  F(int64_t, vocab_size, 256, "Vocabulary size (256 for byte-level data)")                                   \
  F(int64_t, n_layer, 4, "Number of transformer blocks")                                                     \
  F(int64_t, n_head, 4, "Attention heads")                                                                   \
  F(int64_t, n_kv_head, 0, "Key/value heads for grouped-query attention; 0 = n_head")                       \
  F(int64_t, d_model, 256, "Hidden size; must be divisible by n_head")                                       \
  F(int64_t, d_ff, 0, "MLP inner size; 0 = family default (gpt2: 4 × d_model, llama: SwiGLU 8/3 × d_model "   \
    "rounded up to a multiple of 256)")                                                                      \
  F(int64_t, max_seq_len, 256, "Longest sequence (positions) the model supports")                            \
  F(bool, tie_embeddings, true, "Share the token embedding with the output projection")                      \
  F(double, norm_eps, 1e-5, "Epsilon of LayerNorm / RMSNorm")                                                \
  F(double, rope_theta, 500000.0, "RoPE base frequency (llama)")                                             \
  F(double, dropout, 0.0, "Dropout probability on attention and residual paths (0 disables)")              \
  F(int64_t, bos_token_id, -1, "Beginning-of-sequence token id, kept from an imported Hugging Face model and "  \
    "written back on export; -1 = none")                                                                     \
  F(int64_t, eos_token_id, -1, "End-of-sequence token id (the first, where config.json lists several), kept " \
    "from an imported Hugging Face model and written back on export; -1 = none")                            \
  F(int64_t, lora_rank, 0, "LoRA adapters' rank r (docs/lora.md): > 0 freezes every base parameter (held in " \
    "the compute dtype: no fp32 master, no gradient, no optimizer state) and trains only the adapters of "     \
    "y = W x + lora_alpha / r · B(A(dropout x)) on the model.lora_targets projections; 0 = off")               \
  F(double, lora_alpha, 16.0, "LoRA scale numerator: the adapters' output is multiplied by lora_alpha / "     \
    "lora_rank")                                                                                             \
  F(double, lora_dropout, 0.0, "Dropout probability on the LoRA adapters' input while training (0 disables)") \
  F(StringList, lora_targets, (StringList{"q", "k", "v", "o", "gate", "up", "down"}), "Projections that get "  \
    "LoRA adapters (llama), each of q, k, v, o (attention) and gate, up, down (MLP); PEFT's names q_proj … " \
    "down_proj are taken too")                                                                              \
  F(BaseQuant, base_quant, BaseQuant::none, "How the LoRA base's block linears (every projection of every "     \
    "block; not the norms, embeddings or head) are held: none = the compute dtype, nf4 = QLoRA's 4-bit "        \
    "NormalFloat with double-quantized scales (0.52 bytes a parameter), quantized from checkpoint.init_from "   \
    "one weight at a time and dequantized for each GEMM (docs/lora.md \"QLoRA\"); nf4 needs lora_rank > 0")

#define MT_PARALLEL_FIELDS(F)                                                                                \
  F(int64_t, dp, 0, "Data-parallel replicas; 0 = world size / (pp × fsdp × tp)")                             \
  F(int64_t, fsdp, 1, "Fully-sharded data-parallel degree")                                                  \
  F(int64_t, tp, 1, "Tensor-parallel degree (placed inside an NVLink clique)")                               \
  F(bool, allow_slow_tp, false, "Run even when a tensor-parallel group cannot sit inside one NVLink clique "  \
    "(it then talks over PCIe); false makes that an error (see `meshtrain topo`)")                           \
  F(bool, sequence_parallel, false, "With tp > 1: activations outside the tensor-parallel regions (norms, "   \
    "residual stream) hold seq_len / tp tokens per rank; reduce-scatter + all-gather replace the all-reduces") \
  F(int64_t, pp, 1, "Pipeline-parallel degree: contiguous blocks per stage (docs/pipeline.md)")              \
  F(PipelineKind, pp_schedule, PipelineKind::one_f_one_b, "Pipeline schedule (pp > 1; docs/pipeline.md)")     \
  F(int64_t, pp_virtual_stages, 0, "Model chunks per pipeline rank; > 1 only with pp_schedule "             \
    "interleaved-1f1b; 0 = 2 for interleaved-1f1b, 1 otherwise")                                            \
  F(int64_t, pp_microbatches, 0, "Micro-batches per step through the pipeline; must divide the batch of "   \
    "train.micro_batch_size × train.grad_accum sequences; 0 = the smallest divisor ≥ 2 × pp (a multiple of pp " \
    "for interleaved-1f1b)")                                                                                 \
  F(int64_t, pp_first_stage_blocks, 0, "Blocks on the first pipeline stage, which also holds the embedding "  \
    "(fewer eases its memory); 0 = stages balanced by parameter count")                                     \
  F(int64_t, pp_last_stage_blocks, 0, "Blocks on the last pipeline stage, which also holds the head and the " \
    "loss; 0 = stages balanced by parameter count")                                                          \
  F(int64_t, pp_trace_step, 0, "Write a Chrome/Perfetto trace of this step's pipeline actions, one JSON per " \
    "rank in <train.out_dir>/pipeline_trace/; 0 = none")                                                     \
  F(std::string, order, "pp-dp-fsdp-tp", "Rank order of the mesh dims, innermost last")                     \
  F(CommBackend, backend, CommBackend::automatic, "Collective backend (auto: nccl on CUDA, cpu otherwise)") \
  F(double, bucket_mb, 25.0, "Data-parallel gradient bucket size in MiB")                                   \
  F(double, bucket_first_mb, 1.0, "Size in MiB of the first gradient bucket (the last layers' gradients), "   \
    "small so that communication starts early in backward")                                                  \
  F(int64_t, zero_stage, 0, "Sharding of the data-parallel state: 0 = replicated (DDP; 3 when fsdp > 1), "    \
    "1 = optimizer state sharded over dp (ZeRO-1), 2 = + gradients (ZeRO-2), 3 = + parameters (FSDP over dp)") \
  F(bool, fsdp_reshard_after_forward, true, "FSDP: free each block's gathered parameters after its forward "  \
    "(gather again in backward); false keeps them until its backward (more memory, less communication)")     \
  F(Dtype, param_dtype, Dtype::fp32, "FSDP/ZeRO: dtype of the gathered parameters used for compute (shards "  \
    "and optimizer state stay fp32)")                                                   \
  F(Dtype, reduce_dtype, Dtype::fp32, "Dtype of gradient reduction (all-reduce / reduce-scatter)")            \
  F(bool, allow_unused_params, false, "Treat a parameter that gets no gradient as a zero gradient instead "   \
    "of an error")                                                                                           \
  F(MasterLocation, master_location, MasterLocation::device, "FSDP/ZeRO: where the fp32 master shards and the " \
    "optimizer state live (to keep them in host memory set optimizer.offload: cpu)")                         \
  F(bool, force_wrapper, false, "Apply the data-parallel / sharding wrapper in a single process too "         \
    "(to measure its overhead; results are unchanged)")                                                      \
  F(double, timeout_s, 300.0, "Seconds a collective may take before it is an error (never a hang)")

#define MT_COMM_FIELDS(F)                                                                                    \
  F(std::string, nccl_env, "", "NCCL variables meshrun sets in every worker: NAME=VALUE pairs separated by "   \
    "spaces (in YAML also a mapping NAME: VALUE or a list of NAME=VALUE); each NAME must be one NCCL reads "   \
    "(docs/nccl.md lists them, with presets); empty = NCCL's defaults")

#define MT_DATA_FIELDS(F)                                                                                    \
  F(StringList, train, {}, "Training token shards (required): a file or a glob, or a list of sources, each "    \
    "PATTERN:WEIGHT (in YAML also {path: PATTERN, weight: W}), drawn in proportion to the weights (normalised) " \
    "— or, where no entry has one, to each source's tokens (docs/data.md \"Several sources\"); `synthetic` = "  \
    "uniformly random tokens generated on the device (throughput runs: no data loading, no validation)")         \
  F(StringList, val, {}, "Validation token shards: a file or a glob, or a list of them (in YAML also {path: "  \
    "PATTERN}; no weights: each is evaluated on its own, its loss logged beside the overall one); empty = no "  \
    "validation")                                                                                            \
  F(ShardFormat, format, ShardFormat::Auto, "Shard format (auto: llm.c header if the magic is there, else "  \
    "uint16)")                                                                   \
  F(int64_t, seq_len, 0, "Tokens per training sequence; 0 = model.max_seq_len")                             \
  F(LossMask, loss_mask, LossMask::automatic, "Which targets the loss counts (auto: the shards' "           \
    "loss masks where they have them (scripts/prepare_instruct.py: assistant / completion tokens), every "   \
    "token otherwise; all: every token). The loss is the mean over the counted tokens of the whole step")    \
  F(bool, packing, true, "Shards with document boundaries (scripts/prepare_instruct.py): true = several "     \
    "documents per sequence, positions restarting at each, attention never crossing one; false = one "       \
    "document per sequence, padded (a longer one cut at data.seq_len)")

#define MT_OPTIMIZER_FIELDS(F)                                                                               \
  F(OptimizerName, name, OptimizerName::adamw, "Optimizer")                                                  \
  F(double, lr, 3e-4, "Peak learning rate")                                                                  \
  F(double, beta1, 0.9, "Adam beta1")                                                                        \
  F(double, beta2, 0.95, "Adam beta2")                                                                       \
  F(double, eps, 1e-8, "Adam epsilon")                                                                       \
  F(double, weight_decay, 0.1, "Decoupled weight decay (not applied to norms, biases, embeddings)")         \
  F(double, grad_clip, 1.0, "Global gradient-norm clip; 0 disables")                                        \
  F(bool, fused_kernel, true, "On CUDA: AdamW's update in meshtrain's own kernel, one pass over each "       \
    "parameter (PyTorch's fused AdamW's arithmetic, without writing the clipped gradients back); false = "     \
    "at::_fused_adamw_")                                                                                      \
  F(OptimizerOffload, offload, OptimizerOffload::none, "Where the fp32 master weights and AdamW moments live " \
    "and the update runs (cpu: host memory, pinned on CUDA; gradients stream to the host, a multi-threaded "   \
    "CPU AdamW updates each parameter as it arrives, the result goes back; docs/offload.md)")                \
  F(int64_t, offload_threads, 0, "optimizer.offload: cpu: host threads running the update; 0 = the CPUs "    \
    "this process may use, at most 16")                                                                      \
  F(int64_t, offload_delay, 0, "optimizer.offload: cpu: 0 = off; 1 = the delayed update: the host update of " \
    "step N overlaps step N+1's forward and backward, which run on the parameters before it (gradients one " \
    "update stale: a small loss cost; docs/offload.md)")

#define MT_SCHEDULE_FIELDS(F)                                                                                \
  F(LrShape, kind, LrShape::cosine, "Learning-rate shape after warmup") \
  F(int64_t, warmup_steps, 100, "Linear warmup steps from 0 to optimizer.lr")                                \
  F(double, min_lr_ratio, 0.1, "Final learning rate as a fraction of optimizer.lr")                          \
  F(double, decay_fraction, 0.2, "wsd: fraction of train.steps spent in the final decay")

#define MT_TRAIN_FIELDS(F)                                                                                   \
  F(int64_t, steps, 1000, "Optimizer steps to train")                                                        \
  F(int64_t, micro_batch_size, 8, "Sequences per micro-batch per rank")                                      \
  F(int64_t, grad_accum, 1, "Micro-batches accumulated per optimizer step")                                  \
  F(int64_t, seed, 1337, "Seed for initialisation, data order and sampling")                                 \
  F(TrainDevice, device, TrainDevice::automatic, "Where to train (auto: cuda if present)")       \
  F(ComputeDtype, dtype, ComputeDtype::automatic, "Compute precision (auto: bf16 on cuda, fp32 on cpu)") \
  F(StringList, freeze, {}, "Parameters that do not train: globs over parameter names (e.g. "                \
    "`[blocks.0.*, tok_embed.weight]`; `*` matches any characters, dots included); each must match a "       \
    "parameter. Frozen parameters keep their values, get no gradient and no optimizer state; empty = all train") \
  F(bool, activation_checkpointing, false, "Recompute each block's activations in backward")                \
  F(int64_t, loss_chunk_mb, 0, "MiB of fp32 logits per chunk of the fused head + loss, which never holds the " \
    "full logits (less memory: docs/PERFORMANCE.md); 0 = full logits, as plain PyTorch computes them")        \
  F(bool, fused_kernels, true, "Fused CUDA kernels for the loss on full logits, RoPE, SwiGLU, residual add + "  \
    "norm and GPT-2's bias + GELU, and fp32 master weights' gradients written in fp32 by the weight-gradient "  \
    "GEMM (no cast kernel; bias gradients by a column-sum kernel) (fp32/bf16 on CUDA; docs/PERFORMANCE.md); "  \
    "false = PyTorch's composite ops, as eager PyTorch runs them")                                            \
  F(bool, fused_norm, true, "With train.fused_kernels: each block's residual add and the norm after it in one " \
    "fused CUDA kernel, forward and backward; false = the add, then PyTorch's LayerNorm/RMSNorm (to measure " \
    "this kernel on its own)")                                                                                 \
  F(bool, fused_gelu, true, "With train.fused_kernels: GPT-2's MLP bias + GELU fused with its matmul (cuBLASLt " \
    "epilogue without gradients; one kernel for the GELU and bias gradients); false = linear, then GELU")     \
  F(bool, gemm_epilogues, true, "With train.fused_kernels: GPT-2's biases, GELU and residual inside the GEMMs' " \
    "cuBLASLt epilogues (the MLP fc → GELU → proj + residual as one function; every other biased linear's "    \
    "bias gradient in its weight-gradient GEMM); false: fc's GELU kernel and the projections apart, "          \
    "1.8-2.7 % slower on GPT-2 124M on an H200 (docs/PERFORMANCE.md)")                                         \
  F(bool, fused_adds, true, "With train.fused_kernels: adds done by the GEMMs themselves instead of add kernels — " \
    "the MLP's last projection adds the fp32 residual stream in its epilogue, and the input gradients of q/k/v "  \
    "and of SwiGLU's gate/up are summed by their GEMMs (CUDA, bf16/fp16 with fp32 master weights; "            \
    "docs/model.md); false = separate add kernels (to measure this lever on its own)")                          \
  F(bool, gemm_tuning, false, "Time cuBLASLt's candidate kernels for each GEMM shape meshtrain runs through it " \
    "(the weight gradients into fp32, the residual projection, the epilogues) on first use and keep the "      \
    "fastest for the run (docs/model.md); off = cuBLASLt's first pick. The choice rests on timings, so a "     \
    "restarted run may pick other kernels and differ in the last bits: leave it off where resumes must be "   \
    "bit-identical")                                                                                            \
  F(AttentionBackend, attention_backend, AttentionBackend::automatic, "Which SDPA kernel runs attention (ATen's " \
    "per-backend switches, for the whole run; to compare them per shape, `bench train --attention`); checked "  \
    "at start-up against the run's shape, dtype and device, which lists the ones that can run (auto: SDPA's "  \
    "own pick; packed documents use variable-length flash under auto and flash)")                              \
  F(Fp8Scaling, fp8, Fp8Scaling::off, "FP8 matmuls (at::_scaled_mm) in the blocks' linear layers, forward and "  \
    "backward, on GPUs with FP8 (compute capability ≥ 8.9); master weights, norms, attention, the head and the " \
    "loss stay as they are. Scales from each tensor's max at its cast (tensorwise, rowwise), or from the "      \
    "largest of the last 16 casts' maxima at the same place (delayed: one pass over each tensor fewer; the "   \
    "histories are not checkpointed, a resumed run starts them again)")                                        \
  F(int64_t, fp8_min_width, 1024, "With train.fp8: FP8 only in the layers wide enough to gain — in·out / (in + " \
    "out) ≥ this, a group that shares one input cast (q/k/v, gate/up) judged on its outputs together; the "     \
    "others keep bf16 matmuls. 1024 keeps GPT-2 124M (its layers 576–614; FP8 0.85× bf16 on an H200) in bf16 " \
    "and every Llama 3.2 1B / 3.1 8B layer in FP8 (1.18× / 1.26×); 0 = every layer (docs/model.md)")           \
  F(OnOff, cuda_graph, OnOff::off, "CUDA graphs: one micro-batch's forward + backward captured after "       \
    "warm-up steps and replayed for every micro-batch (static shapes; CUDA, a single process, no dropout, "   \
    "activation checkpointing, offload or packed documents: refused at start-up otherwise)")                 \
  F(int64_t, eval_every, 100, "Validation every N steps (and at the end); 0 disables")                       \
  F(int64_t, eval_batches, 8, "Micro-batches per validation")                                                \
  F(int64_t, max_nonfinite_steps, 3, "Steps in a row whose loss or gradient norm is inf/nan (their update is "  \
    "skipped, counted in the metrics' skipped_steps) before the run stops with an error")                     \
  F(int64_t, sample_tokens, 0, "Tokens generated per sample (at the end of training, and every "             \
    "train.sample_every steps); 0 disables samples")                                                         \
  F(int64_t, sample_every, 0, "Samples every N steps too (with train.sample_tokens > 0), into the log, the "   \
    "metrics (`samples`) and TensorBoard (text); 0 = only at the end")                                       \
  F(std::string, sample_prompt, "", "Prompt of the samples when train.sample_prompts is empty")               \
  F(StringList, sample_prompts, {}, "Prompts sampled, one sample each, through the model's tokenizer.json "   \
    "(found in train.out_dir or checkpoint.init_from: what `meshtrain import` copies; byte-level without one) " \
    "and, for instruction data (shards with loss masks), its chat template; empty = [train.sample_prompt]")  \
  F(int64_t, threads, 0, "CPU threads per worker for intra-op parallelism; 0 = torch default")              \
  F(int64_t, profile_steps, 0, "Steps recorded by the profiler (CPU ops, CUDA kernels): a Chrome/Perfetto "    \
    "trace per rank and a table of the top kernels by step phase (docs/profiling.md); 0 = off")              \
  F(int64_t, profile_start, 5, "First profiled step (0-based; the first steps pay for warm-up)")            \
  F(std::string, profile_dir, "", "Where profiles go; empty = <train.out_dir>/profile")                     \
  F(std::string, out_dir, "runs/default", "Run directory: metrics, logs and (by default) checkpoints")       \
  F(bool, overwrite, false, "A run starting at step 0 (checkpoint.resume: none) where checkpoint.dir holds "   \
    "checkpoints or the metrics file has records: true removes them first (and says so); false refuses the "   \
    "run, naming them (`meshtrain train --overwrite` / `meshrun … CONFIG --overwrite` set it)")

#define MT_CHECKPOINT_FIELDS(F)                                                                              \
  F(std::string, dir, "", "Checkpoint directory; empty = <train.out_dir>/checkpoints")                       \
  F(int64_t, every, 0, "Save every N steps (and at the end); 0 = only at the end")                           \
  F(int64_t, keep, 3, "Keep the newest K checkpoints; 0 keeps all")                                          \
  F(int64_t, memory_every, -1, "In-memory checkpoints under meshrun: each rank's state in its node's "        \
    "memory (/dev/shm, removed when meshrun exits) and a replica in the next node's, so a restart after a "     \
    "failure (checkpoint.resume auto) resumes from the newest step every rank still reaches, not the last disk " \
    "checkpoint (docs/resilience.md). N = every N steps; -1 = auto: on under checkpoint.resume auto where the "  \
    "node's memory holds them, at the interval where they cost ≤ 3 % of the time (measured once); 0 = off")                                                      \
  F(std::string, resume, "none", "Resume from; one of: none | auto (the newest usable checkpoint in "       \
    "checkpoint.dir; a fresh start only where it holds none) | a checkpoint path")                           \
  F(std::string, init_from, "", "Fine-tuning: the model's weights at step 0, with fresh optimizer state, "  \
    "from this checkpoint (any layout's training checkpoint, or what `meshtrain import` wrote), a Hugging "    \
    "Face model directory read in place (config.json + safetensors; its tokenizer files are copied to "      \
    "train.out_dir) or an org/name in the local Hugging Face cache (offline); a config with no model shape "  \
    "(no preset, no shape key) takes this source's, one with a shape must match it; LoRA's frozen base; "     \
    "ignored when a resume finds a checkpoint; empty = seeded initialisation")                    \
  F(bool, save_final, true, "Save a checkpoint when training ends")

#define MT_LOGGING_FIELDS(F)                                                                                 \
  F(LogLevel, level, LogLevel::info, "Log level (MESHTRAIN_LOG_LEVEL overrides)")                             \
  F(int64_t, every, 10, "Progress line every N steps")                                                       \
  F(bool, all_ranks, false, "Progress lines from every rank, not only rank 0")                               \
  F(std::string, metrics, "", "Metrics JSONL file; empty = <train.out_dir>/metrics.jsonl")                 \
  F(std::string, tensorboard, "", "TensorBoard event directory: every metric of the JSONL as a scalar, the "  \
    "samples as text, the resolved config as hyperparameters (HParams tab) and as text (rank 0); empty = none") \
  F(WandbMode, wandb, WandbMode::off, "Weights & Biases (rank 0, through the `wandb` package of "            \
    "logging.wandb_python): the resolved config as the run's config, every metric, the samples as a table; "  \
    "offline writes <train.out_dir>/wandb/ for a later `wandb sync`; a resumed run continues the same run")   \
  F(std::string, wandb_project, "meshtrain", "Weights & Biases project of the run (logging.wandb)")           \
  F(std::string, wandb_python, "python3", "The Python that has the `wandb` package (logging.wandb), by name " \
    "on PATH or by path")                                                                                    \
  F(bool, gpu_telemetry, true, "Every logged step: each rank's GPU power, temperature, clocks, utilisation, " \
    "memory and throttle reasons through NVML into the metrics (absent without an NVIDIA GPU)")              \
  F(double, straggler_threshold, 0.2, "The step log names the slowest rank when its step time exceeds the "  \
    "median of all ranks' by more than this fraction (0.2 = 20 %); 0 disables")

// `meshtrain serve` (docs/serving.md): read from the checkpoint's recorded config, or from --config FILE where
// given; --set serve.KEY=VALUE and the command's flags of the same names go on top.
#define MT_SERVE_FIELDS(F)                                                                                   \
  F(std::string, host, "127.0.0.1", "Address the server listens on")                                         \
  F(int64_t, port, 8000, "Port the server listens on; 0 = a free one (printed at start)")                      \
  F(double, gpu_memory_fraction, 0.9, "On CUDA: the share of the device memory left free by the weights that "  \
    "the KV cache and one engine step may take; the blocks it makes are reported at start")                   \
  F(int64_t, blocks, 0, "KV cache blocks; 0 = on CUDA what serve.gpu_memory_fraction leaves, on the CPU 256; " \
    "on CUDA a number that does not fit in the free memory is refused")                                      \
  F(int64_t, block_size, 16, "Tokens per KV cache block")                                                    \
  F(int64_t, max_running, 16, "Requests decoding at once")                                                   \
  F(int64_t, max_waiting, 256, "Requests waiting for admission at most; more are answered 503 at once")      \
  F(int64_t, max_step_tokens, 2048, "Tokens per engine step: a decode counts 1, a prefill chunk its length")  \
  F(std::string, max_body, "8M", "Largest request body: bytes, or with K, M or G")                          \
  F(bool, cuda_graphs, true, "Replay decode steps as CUDA graphs on a GPU")                                  \
  F(int64_t, drain_timeout_s, 30, "Seconds a SIGINT or SIGTERM waits for the requests in flight before "     \
    "cutting them off")
// clang-format on

#define MT_DECLARE_FIELD(type, key, def, doc) type key = def;

// Member-wise equality (exact for doubles): what the round-trip tests compare.
#define MT_DECLARE_SECTION(Name, FIELDS) \
  struct Name {                           \
    FIELDS(MT_DECLARE_FIELD)              \
    bool operator==(const Name&) const = default; \
  };

MT_DECLARE_SECTION(ModelConfig, MT_MODEL_FIELDS)
MT_DECLARE_SECTION(ParallelConfig, MT_PARALLEL_FIELDS)
MT_DECLARE_SECTION(CommConfig, MT_COMM_FIELDS)
MT_DECLARE_SECTION(DataConfig, MT_DATA_FIELDS)
MT_DECLARE_SECTION(OptimizerConfig, MT_OPTIMIZER_FIELDS)
MT_DECLARE_SECTION(ScheduleConfig, MT_SCHEDULE_FIELDS)
MT_DECLARE_SECTION(TrainConfig, MT_TRAIN_FIELDS)
MT_DECLARE_SECTION(CheckpointConfig, MT_CHECKPOINT_FIELDS)
MT_DECLARE_SECTION(LoggingConfig, MT_LOGGING_FIELDS)
MT_DECLARE_SECTION(ServeConfig, MT_SERVE_FIELDS)
#undef MT_DECLARE_SECTION

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  CommConfig comm;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainConfig train;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  ServeConfig serve;

  std::string source;  // the file it was loaded from ("" if built in code); used in error messages

  bool operator==(const Config&) const = default;  // includes `source`
};

// data.train's value for random tokens generated on the training device.
inline constexpr const char* kSyntheticData = "synthetic";

// Loads FILE (.yaml/.yml or .json), applies the model preset, then `overrides` ("section.key=value", YAML
// scalar syntax for the value), in that order. Throws UserError: malformed file (with line and column),
// unknown key (with the nearest valid key), wrong type (key path, given, expected).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from text already in memory; `name` stands for the file in messages; JSON if `json`.
Config parse_config(const std::string& text, const std::string& name, bool json,
                    const std::vector<std::string>& overrides = {});

// Every rule in one place, before any worker starts. world_size < 1 skips the rules that need it. Throws
// UserError "FILE: section.key: given …; valid …" with the arithmetic where it applies
// ("dp(2) × tp(4) = 8 ≠ world size 6").
void validate(const Config& cfg, int world_size);
// The serve section's rules alone (what `meshtrain serve` reads of a config), in the same words.
void validate_serve(const Config& cfg);

// The input files a run reads exist: every source of data.train (and of data.val) matches at least one file, and
// (cfg resolved for its world size) their sizes allow the windows of one step: micro_batch_size × data-parallel
// ranks for a source read alone (data.val's, only where train.eval_every > 0), one window for each source of a
// mixture. Throws UserError "FILE: data.train: 'PATTERN' matches no file" or "… holds
// at most N windows …; one step needs …". Paths are relative to the working directory.
void check_inputs_exist(const Config& cfg);

// Fills derived values: model preset fields already applied; parallel.dp when 0, data.seq_len when 0,
// model.n_kv_head when 0, model.d_ff when 0, checkpoint.dir / logging.metrics defaults from train.out_dir.
void resolve(Config& cfg, int world_size);

// The config as YAML (every field, resolved values) — what `meshtrain config FILE` prints.
std::string to_yaml(const Config& cfg);
// YAML that sets only the keys in `written` (a section name takes all its keys, "section.key" one) to cfg's
// values; every other key is a comment holding its default and doc, a template to fill in. Loads back to a
// Config with those keys from cfg and defaults elsewhere. What `meshtrain import` writes.
std::string to_yaml_template(const Config& cfg, const std::vector<std::string>& written);
// The config as JSON (stored in checkpoints and metrics headers); pretty-printed, no trailing newline.
std::string to_json(const Config& cfg);
// Markdown reference of every section/key/type/default/doc: the content of docs/config.md.
std::string config_reference_markdown();

// Applies a named model preset to `m` (shape fields only). Throws UserError naming the valid presets.
void apply_model_preset(const std::string& preset, ModelConfig& m);
const std::vector<std::string>& model_preset_names();

}  // namespace meshtrain
