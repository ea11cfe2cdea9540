// ActivationModel: the bytes autograd keeps for backward in one micro-batch, per block and for the head and
// loss, on one rank — what model/ and parallel/ save, tensor by tensor (docs/plan.md has the formulae). With N
// tokens per micro-batch, t = tp, Ns = N / t under sequence parallelism (else N), c = compute element size
// (bf16 2, fp32 4), q = query width, k = key/value width, F = d_ff, H heads:
//
//   norm inputs            2 × 4·Ns·D       (norms run in fp32 under autocast and save their input)
//   linear inputs          c·N·D per linear that casts it (bf16: q, k, v each cast the norm output: 3 + the
//                          MLP's 2 (llama) or 1 (gpt2); fp32: one shared norm output per norm)
//   attention              c·N·(q + 2k)/t (q, k after RoPE, v) + c·N·q/t (output) + 4·N·H/t (log-sum-exp)
//   MLP                    llama: c·N·F/t × 3 (gate, up, product; 4 without the fused SwiGLU); gpt2: × 2
//   activation checkpoint  the block's input only (e·Ns·D, e = the residual stream's element size: 4 where the
//                          embedding trains in fp32, 2 where it is frozen in bf16 — LoRA's and QLoRA's base — and
//                          its lookup, and so every residual add after it, is bf16); the block's set comes back
//                          during its backward
//
// Pipeline schedules: held_microbatches() is where a schedule says how many micro-batches' activations a stage
// holds at once (1 without pipelining; 1F1B: min(pp − stage, grad_accum)).
#pragma once

#include <cstdint>

#include "meshtrain/core/config.h"

namespace meshtrain::plan {

struct ActivationInputs {
  int64_t micro_batch = 1, seq_len = 1;
  int64_t tp = 1;
  bool sequence_parallel = false;
  int compute_bytes = 2;       // 2: bf16 autocast, 4: fp32
  bool fused_kernels = true;   // fused softmax cross-entropy, RoPE, SwiGLU (CUDA only)
  bool checkpointing = false;  // train.activation_checkpointing
  int64_t loss_chunk_bytes = 0;  // train.loss_chunk_mb in bytes; 0 = full logits
  // Whether the head's weight trains. A frozen head (LoRA) makes no weight gradient, and its matmul keeps no
  // copy of its input (autograd saves a matmul's input only for the weight's gradient).
  bool head_trains = true;
  // Whether the blocks' base weights train. Under LoRA only the adapters do: a block's backward makes no
  // weight gradient larger than an adapter's (r × max(D, F)).
  bool block_weights_train = true;
  // The residual stream's element size (the block's input, what activation checkpointing keeps): the
  // embedding's dtype as held — fp32 (4) where it trains, the compute dtype where it is frozen in it (LoRA's
  // base on a GPU: bf16, 2; model/transformer.cpp's lookup output, then bf16 + bf16 residual adds).
  int residual_bytes = 4;
};

struct HeadBytes {
  int64_t saved = 0;          // kept from the forward until the head's backward
  int64_t forward_peak = 0;   // on top of `saved`, briefly, while the loss is computed
  int64_t backward_peak = 0;  // on top of `saved`, briefly, at the start of backward (logit and weight gradients)
};

struct ActivationBytes {
  int64_t block = 0;             // saved per block without checkpointing
  int64_t block_checkpoint = 0;  // saved per block with checkpointing (its input)
  int64_t block_backward = 0;    // transient during a block's backward (inner activation and weight gradients)
  HeadBytes head;
  int64_t inputs = 0;            // the micro-batch's token ids and targets

  // Saved per block under the run's setting.
  int64_t block_held(bool checkpointing) const { return checkpointing ? block_checkpoint : block; }
};

ActivationBytes activation_bytes(const ModelConfig& m, const ActivationInputs& in);

// Micro-batches whose activations a pipeline stage holds at its peak (pipeline/pp: docs/plan.md). pp = 1: 1.
int64_t held_microbatches(int64_t pp, int64_t stage, int64_t grad_accum);

}  // namespace meshtrain::plan
