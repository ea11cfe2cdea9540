// A model's block weights held in FP8 for inference (docs/serving.md "FP8 weights", `meshtrain serve --quantization
// fp8`): every linear layer of the blocks whose forward is x·Wᵀ + b keeps its weight as an Fp8Weight
// (model/linear/fp8_weight.h: e4m3 codes and a scale per output row), so a decode step reads half the bytes a bf16
// weight takes. Embeddings, norms and the head stay as they are. The layers that read one input (q, k and v;
// SwiGLU's gate and up) are quantized into one buffer, side by side, so that the fused projections
// (model/fused_projections.h) run each group as one FP8 GEMM.
//
//   MT_USER_CHECK(model::fp8_weights_refusal(*net).empty(), ...);
//   const auto s = model::hold_weights_in_fp8(*net);      // once, before an engine captures the weights
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

struct Fp8WeightsSummary {
  int64_t layers = 0;        // linear layers now held in FP8
  int64_t bytes_before = 0;  // their weights' bytes as they were
  int64_t bytes_after = 0;   // their FP8 codes and scales
};

// Holds the blocks' linear layers that can (LinearImpl::can_hold_fp8(): a tensor-parallel shard too, not an
// adapted layer; both sizes multiples of 16) in FP8; layers
// already in FP8 and the others are left as they are. The old weights are released (a CUDA caller may hand the
// caching allocator's memory back to the device).
Fp8WeightsSummary hold_weights_in_fp8(TransformerImpl& model);

// Why this model cannot serve with FP8 weights where it is, or "" where it can: a GPU without FP8 matmuls
// (compute capability below 8.9), or no block layer that FP8 would take. The CPU computes the same maths with
// composite ops (slowly: for tests and small models).
std::string fp8_weights_refusal(const TransformerImpl& model);

}  // namespace meshtrain::model
