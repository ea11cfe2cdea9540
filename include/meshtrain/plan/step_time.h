// StepTime: one optimizer step's predicted duration on one GPU = compute + passes over the parameters + the
// communication that is not hidden behind it + the pipeline bubble.
//
//   compute   tokens per rank × FLOPs per token (6 × (non-embedding params + V·D) + 6·L·T·D, as the metrics count
//             them; − 2 per frozen weight, whose weight gradient is never computed (LoRA's base: ≈ 4N); + a
//             block forward again under activation checkpointing) ÷ (tp × pp) ÷ (peak × MFU), the MFU
//             measured for the shape with the measurement's own parameter passes taken out (mfu_table.h); a
//             third of it forward, two thirds backward.
//   passes    memory-bound passes whose time follows the parameters this rank holds, not the tokens, at
//             kPassEfficiency of the GPU's memory bandwidth: the on-device AdamW step (read weight, gradient
//             and both moments, write weight and moments: 28 bytes an element, + 4 for the norm's read), once a
//             step over the optimizer's elements (none when offloaded); per micro-batch, the bf16 copy of each
//             fp32 weight for the matmuls (read 4, write 2; again in the recompute under checkpointing) and the
//             weight gradient's accumulation: where the linears take fp32 weights themselves, ∂W leaves the GEMM
//             in fp32 and every micro-batch after the first adds it to the gradient (read 4 + 4, write 4);
//             elsewhere each bf16 ∂W is accumulated into an fp32 buffer (read 2, write 4). They matter where a
//             step has few tokens per parameter: the whole Llama 3.1 8B at micro-batch 1 × 2048 tokens spends
//             about a third of its step in them.
//   host update  optimizer offload (docs/offload.md): the host threads' AdamW over this rank's optimizer
//             elements, once a step, at kHostUpdateParamsPerS; exposed whole (the held and downloaded ways update
//             after the backward; the streamed way's overlap with the backward is not counted), except under the
//             delayed update, which runs under the next step's compute and shows only where it is longer.
//   collectives  ring volumes over the link the group sits on (gpu_spec.h; a group whose ranks span nodes uses
//             the network): all-reduce 2(n−1)/n × bytes, all-gather / reduce-scatter (n−1)/n × bytes.
//   overlap   DDP's all-reduce runs under backward (the last bucket, with the embeddings, cannot); ZeRO-2 and FSDP
//             reduce-scatter under backward, FSDP's all-gathers under forward/backward (prefetch one block;
//             the first unit cannot; frozen parameters — LoRA's base — are gathered too, in the dtype they are
//             held in, but only trainable ones are reduced); ZeRO-1/2's gather after the step, HSDP's replica all-reduce, tensor
//             parallelism's per-layer all-reduces and pipeline transfers are not overlapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/gpu_spec.h"
#include "meshtrain/plan/mfu_table.h"

namespace meshtrain::plan {

struct Collective {
  std::string what;      // "ddp all-reduce of gradients"
  std::string link;      // nvlink | network
  double bytes = 0;      // per step, per rank, the payload (before the ring factor)
  double seconds = 0;    // at the link's bus bandwidth
  double exposed_s = 0;  // of that, not hidden behind compute
  std::string overlap;   // how it overlaps
};

struct StepTime {
  double model_flops_per_token = 0;  // as the metrics count MFU
  double flops_per_gpu = 0;          // executed per step on one GPU (recomputation included)
  double mfu = 0;                    // the compute's own: the table's, its row's passes taken out
  std::string mfu_source;
  double compute_s = 0;
  double pass_bytes = 0;             // the parameter passes' bytes per step on one GPU
  double pass_s = 0;                 // their time
  double host_update_s = 0;          // optimizer offload: the host's AdamW over this rank's elements, a step
  double host_exposed_s = 0;         // of that, not hidden behind compute
  std::vector<Collective> comm;
  double exposed_comm_s = 0;
  double bubble_s = 0;
  double step_s = 0;
  double tokens_per_step = 0;  // the whole job's
  double tokens_per_s = 0;
};

// The fraction of the memory bandwidth the parameter passes reach: the whole Llama 3.1 8B measured on the H200 at
// micro-batch 1 × 2048 (0.2352 s) and at 2 × 2048 with checkpointing (0.4939 s; docs/PERFORMANCE.md, 2026-12-06),
// solved for one compute MFU and one pass rate with the bytes below: 38 and 44 bytes a parameter at 3.6 TB/s,
// 0.76 of the 4.8 TB/s (AdamW's kernel alone reaches a device copy's 4.2). The first fit (0.55) counted a
// gradient pass that ∂W straight into fp32 removed, and predates AdamW's kernel. The fit's compute MFU is 0.64;
// the plan takes the table's (mfu_table.h), whose 8B row (the 8-layer shape, measured before either) gives 0.57,
// so the plan is 8 % and 10 % long of those two steps until that row is measured again.
constexpr double kPassEfficiency = 0.76;
// Bytes an element of each pass: the on-device AdamW step with the norm's read, the bf16 copy of an fp32 weight
// for the matmuls, a bf16 weight gradient's accumulation into fp32, an fp32 weight gradient added to another.
constexpr double kOptimizerPassBytes = 28 + 4, kCastPassBytes = 4 + 2, kGradPassBytes = 2 + 4;
constexpr double kAddPassBytes = 4 + 4 + 4;
// The passes of one measured MFU row's step (mfu_table.h): a single GPU, on-device AdamW, fp32 weights under
// bf16 autocast (∂W straight into fp32), one micro-batch, no checkpointing.
constexpr double kRowPassBytes = kOptimizerPassBytes + kCastPassBytes;

// The host's offloaded AdamW rate, optimizer elements a second for one rank on its host at the default threads
// (16): the gradient down, the update of master and moments, the parameter up. Measured 4.63e9 on the H200
// machine (Llama 3.2 3B, 693 ms a step) and 4.69e9 and 3.50e9 on two H100 machines (the whole Llama 3.1 8B, 1,711
// and 2,291 ms), docs/PERFORMANCE.md; the host, not the GPU, sets it. Ranks sharing a host share its memory
// bandwidth, which this does not count (not measured).
constexpr double kHostUpdateParamsPerS = 4.6e9;

// `cfg` resolved for gpus_per_node × nodes ranks.
StepTime estimate_step_time(const Config& cfg, int64_t gpus, int64_t nodes, const GpuSpec& gpu,
                            const MfuTable& mfu);

}  // namespace meshtrain::plan
