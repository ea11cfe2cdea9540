// RankState: the bytes of training state one rank holds — parameters, fp32 master shards, gradients and AdamW
// state — counted parameter by parameter from the ParamTable exactly as parallel/ allocates them:
//
//   replicated (plain, DDP, DDP × TP)   fp32 parameters (also the master copy), fp32 gradients (DDP: flat
//                                        buckets kept for the whole run; plain: made by backward, dropped after
//                                        the step), AdamW m and v in fp32 plus a 4-byte step count per tensor
//   ZeRO-1/2 (parallel/fsdp/fully_shard.h)    full parameters in param_dtype stay gathered; fp32 master shard and
//                                        fp32 gradient shard per unit (rows of dim 0 padded to ceil(rows / W));
//                                        AdamW state on the unpadded local rows
//   FSDP / HSDP                          as ZeRO, but the full parameters exist only while gathered (those
//                                        bytes are the memory model's "gathered units", not state)
//   a shard group of one with fp32 parameters aliases the module's parameters to the master shard
//   optimizer.offload: cpu, replicated or FSDP/HSDP without TP or pipeline, streamed (parallel/gradient_sink.h,
//   core/gradient_streaming.h): trainable parameters in the compute dtype (FSDP: the shards, padding included,
//                                        counted as params) — the fp32 master is on the host;
//                                        gradients leave during the backward: DDP keeps its buckets (in the
//                                        compute dtype), a plain model and FSDP none after the step
//   optimizer.offload: cpu, replicated without TP, accumulating, not delayed: held — trainable parameters and
//                                        their gradients in the compute dtype (DDP: in its buckets), the fp32
//                                        master and the moments on the host
// Tensor parallelism first cuts each parameter into this rank's block (param_table.h); frozen parameters
// (train.freeze) have no gradient and no optimizer state.
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {

// The layout a resolved config asks for, with parallelize()'s derived choices.
struct RankLayout {
  int64_t dp = 1, fsdp = 1, tp = 1, pp = 1;
  int zero_stage = 0;         // effective: 3 when fsdp > 1 and zero_stage 0
  int64_t shard = 1;          // ranks a sharded parameter is split over (fsdp, else dp); 1 when not sharded
  bool hsdp = false;          // sharded over fsdp and replicated over dp
  bool reducer = false;       // stage 0 with a gradient reducer (DDP buckets)
  bool alias = false;         // stage ≥ 1, a shard group of one, fp32 parameters: module parameters are the shards
  int param_bytes = 4;        // gathered parameters' element size (parallel.param_dtype)
  int reduce_bytes = 4;       // gradient reduction element size (parallel.reduce_dtype)
  int frozen_bytes = 4;       // element size of a frozen parameter (LoRA's base: the compute dtype, bf16 on GPU)
  bool stream = false;        // optimizer offload streams the gradients (replicated or FSDP, no TP, no pipeline)
  bool hold = false;          // optimizer offload holds the gradients on the device in the compute dtype
                              // (replicated, no TP, accumulating, not delayed)
  int stream_bytes = 4;       // then (either): element size of a trainable parameter or FSDP shard (the compute dtype,
                              // bf16 on GPU)
  bool nf4 = false;           // model.base_quant nf4: the frozen block linears held in NF4, never cast —
                              // whole on every rank in the replicated layouts (nf4_bytes each), by rows of
                              // 256 quantization blocks under FSDP/ZeRO (nf4_shard_bytes), gathered as bytes

  static RankLayout from(const Config& cfg, int64_t world_size);
  // Whether autocast makes bf16 copies of the weights under bf16 compute (`bf16`): not of FSDP/ZeRO's bf16
  // parameters, nor of the compute-dtype parameters streamed or held offload keeps (the memory model counts the
  // copies, the step-time model their pass).
  bool casts_weights(bool bf16) const { return bf16 && (zero_stage > 0 ? param_bytes == 4 : !stream && !hold); }
};

// Bytes of `n` values in NF4 as model/nf4_tensor.h holds them: two codes a byte, an 8-bit absmax per 64 values,
// an fp32 scale per 256 absmaxes, the 256-entry fp32 map and the offset — 0.516 bytes a value.
int64_t nf4_bytes(int64_t n);
// Under FSDP/ZeRO (parallel/fsdp/fully_shard.h): the NF4 storage of `n` values in rows of 16384 values (8192 code
// bytes, 256 absmax codes, a 4-byte scale: kNf4RowBytes), nf4_rows(n) of them; a rank holds ceil(rows / shard)
// rows (padded) plus the map and offset whole, and gathers all the rows (nf4_gathered_bytes).
constexpr int64_t kNf4RowBytes = 8192 + 256 + 4;
int64_t nf4_rows(int64_t n);
int64_t nf4_gathered_bytes(int64_t n);  // nf4_rows(n) × kNf4RowBytes
int64_t nf4_shard_bytes(int64_t n, int64_t shard);
// Whether parameter `p` (trains: `train`) is held in NF4 under layout `l` (QLoRA's frozen block linears).
bool held_in_nf4(const RankLayout& l, const ParamSpec& p, bool train);

struct RankState {
  int64_t params = 0;     // module parameters held outside the master copy (replicated: the fp32 weights;
                          // streamed offload: the trainable parameters or FSDP shards in the compute dtype)
  int64_t master = 0;     // fp32 master shards of trained parameters (sharded layouts; padding included)
  int64_t frozen = 0;     // shards of frozen parameters (sharded layouts; padding included): no master, held as
                          // they are — LoRA's base in the compute dtype (bf16 on GPU), else fp32; QLoRA's NF4
                          // block linears (whole when replicated, their rows' shard under FSDP/ZeRO)
  int64_t grads = 0;      // gradients after the step's backward (sharded: the fp32 shard gradients)
  int64_t optimizer = 0;  // AdamW exp_avg + exp_avg_sq (fp32) + a 4-byte step count per optimized tensor
  int64_t gathered_params = 0;  // FSDP: this rank's full parameters of every unit (their share when gathered)

  int64_t total() const { return params + master + frozen + grads + optimizer; }
};

// Rank (tp_rank, shard_rank)'s state under `cfg` (resolved) on `world_size` ranks. With pp > 1 (planned only:
// pipeline parallelism is not built yet) the rank holds pipeline stage `pp_stage`'s blocks — an even split of
// the layers — with the embeddings on the first stage and the final norm and head on the last (a tied embedding
// on both).
RankState rank_state(const Config& cfg, int64_t world_size, int64_t tp_rank, int64_t shard_rank,
                     int64_t pp_stage = 0);
// The largest state of any rank (item by item), what the memory model plans for.
RankState worst_rank_state(const Config& cfg, int64_t world_size);

}  // namespace meshtrain::plan
