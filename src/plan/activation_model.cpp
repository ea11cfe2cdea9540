// Saved-activation bytes per block and for the head (activation_model.h).
#include "meshtrain/plan/activation_model.h"

#include <algorithm>

namespace meshtrain::plan {
namespace {

// The loss head: final norm, output projection and cross-entropy, per micro-batch.
HeadBytes head_bytes(const ModelConfig& m, const ActivationInputs& in, int64_t N, int64_t Ns) {
  const int64_t D = m.d_model, V = m.vocab_size, c = in.compute_bytes, t = in.tp;
  HeadBytes h;
  // The norm's input; the head's bf16 input, kept for the weight's gradient.
  h.saved = 4 * Ns * D + (c == 2 && in.head_trains ? c * N * D : 0);
  // The weight's gradient in bf16, then its fp32 cast; none for a frozen head.
  const int64_t weight_grad = !in.head_trains ? 0 : c == 2 ? 2 * V * D / t + 4 * V * D / t : 4 * V * D / t;
  const int64_t weight_grad_bf16 = in.head_trains ? c * V * D : 0;
  if (t > 1) {
    // Vocab-parallel loss (parallel/tp/tp_cross_entropy.cpp): softmax of this rank's block in fp32 is kept; the
    // forward holds the logits, their fp32 copy, the shifted values and their exp at once.
    const int64_t rows = (V + t - 1) / t;
    h.saved += 4 * N * rows;
    h.forward_peak = (c + 8) * N * rows;
    h.backward_peak = std::max((4 + c) * N * rows + c * N * D, weight_grad);
    return h;
  }
  if (in.loss_chunk_bytes > 0) {
    // model/linear/linear_cross_entropy.h: ∂x and ∂W are made in the forward and kept; one chunk of logits at a time.
    const int64_t rows = std::max<int64_t>(1, in.loss_chunk_bytes / (4 * V));
    h.saved += c * N * D + 4 * V * D;
    h.forward_peak = (c + 12) * std::min(rows, N) * V;
    h.backward_peak = c * N * D + 4 * V * D;
    return h;
  }
  const int64_t logits = c * N * V;
  if (in.fused_kernels) {
    // Fused loss: only the logits, whose gradient is written in place.
    h.saved += logits;
    h.backward_peak = std::max(weight_grad_bf16 + c * N * D, weight_grad - logits);
    return h;
  }
  // Composite loss: an fp32 copy of the logits and the fp32 log-softmax kept (bf16), then the bf16 logit
  // gradient on top at the start of backward; in fp32 the log-softmax and two fp32 gradients.
  h.saved += logits + (c == 2 ? 8 * N * V : 4 * N * V);
  h.backward_peak = c == 2 ? 2 * N * V : 8 * N * V;
  return h;
}

}  // namespace

ActivationBytes activation_bytes(const ModelConfig& m, const ActivationInputs& in) {
  const bool llama = m.family == Family::llama;
  const int64_t N = in.micro_batch * in.seq_len, t = in.tp, c = in.compute_bytes;
  const int64_t Ns = in.sequence_parallel && t > 1 ? N / t : N;
  const int64_t D = m.d_model, hd = m.d_model / m.n_head, q = m.n_head * hd, kv = m.n_kv_head * hd, F = m.d_ff;
  const int64_t H = m.n_head;
  const int64_t linears_in = llama ? 5 : 4;  // q, k, v + the MLP's input linears
  const bool sp = in.sequence_parallel && t > 1;
  const int64_t casts = c == 2 ? linears_in * c * N * D : (sp ? linears_in * 4 * N * D : 2 * 4 * N * D);
  const int64_t attn = c * N * (q + 2 * kv) / t + c * N * q / t + 4 * N * H / t;
  const int64_t mlp = (llama ? (in.fused_kernels ? 3 : 4) : 2) * c * N * F / t;
  ActivationBytes a;
  a.block = 2 * 4 * Ns * D + casts + attn + mlp;
  a.block_checkpoint = in.residual_bytes * Ns * D;
  // The MLP's inner gradients (two [N, F/t]) and the largest weight's gradient (bf16 and its fp32 cast): under
  // LoRA an adapter's, A [r, F] or B [F, r] (the adapters are not split by tensor parallelism).
  const int64_t w = in.block_weights_train ? std::max(q * D, D * F) / t : m.lora_rank * std::max(D, F);
  a.block_backward = 2 * c * N * F / t + (c == 2 ? 6 : 4) * w;
  a.head = head_bytes(m, in, N, Ns);
  a.inputs = 2 * 8 * in.micro_batch * (in.seq_len + 1);
  return a;
}

int64_t held_microbatches(int64_t pp, int64_t stage, int64_t grad_accum) {
  if (pp <= 1) return 1;
  return std::max<int64_t>(1, std::min(pp - stage, grad_accum));  // 1F1B: warm-up forwards in flight
}

}  // namespace meshtrain::plan
