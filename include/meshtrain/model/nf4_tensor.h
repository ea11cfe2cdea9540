// Nf4Tensor: a tensor held in 4-bit NormalFloat (NF4, Dettmers et al. 2023, "QLoRA") with double-quantized
// scales, laid out as bitsandbytes stores it (quantize_4bit(..., quant_type="nf4", compress_statistics=True)):
//
//   w (n values, row-major) in blocks of 64:  absmax_b = max |w_i| over block b
//   codes:          the index of the NF4 level nearest to w_i / absmax_b, two a byte, the first in the high nibble
//   absmax_codes:   absmax_b − offset (offset = the mean of all absmax) on the signed 8-bit dynamic map, in
//                   blocks of 256 absmaxes, each over its own fp32 absmax (absmax_scales)
//   dequantized:    w_i ≈ NF4[code_i] · (dynamic[absmax_code_b] · absmax_scale_{b / 256} + offset), in fp32
//
// 0.5 bytes a value plus 1/64 (the 8-bit scales) and 4/16384 (their fp32 scales): 0.516 bytes. The last block
// of a size that is not a multiple of 64 (or 256) is shorter and has its own scale. Ties between two levels
// round down, and a block is scaled by the reciprocal of its absmax (a short last block: divided by it), as
// bitsandbytes does: the codes equal its (tests/reference/nf4_test.py). Quantizing runs in ATen on any device;
// dequantizing runs one CUDA kernel on a GPU (src/model/kernels/nf4_dequantize.cu), ATen on the CPU — the same
// fp32 products either way (no fused multiply-add), so both give the same bits.
//
//   auto q = model::Nf4Tensor::quantize(w);          // w: any float tensor, e.g. a frozen base weight
//   at::Tensor w2 = q.dequantize(at::kBFloat16);      // w's shape, on q's device
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <vector>

namespace meshtrain::model {

struct Nf4Tensor {
  static constexpr int64_t kBlock = 64;         // values per absmax
  static constexpr int64_t kAbsmaxBlock = 256;  // absmaxes per second-level (fp32) scale

  // The 16 NF4 levels (bitsandbytes' table: the quantiles of N(0, 1) scaled to [-1, 1], with an exact 0).
  static const std::array<float, 16>& levels();
  // bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True)): 256 sorted fp32 values in
  // [-1, 1], on `device`.
  static at::Tensor dynamic_map(const at::Device& device);

  // `w` (fp32, bf16 or fp16, any shape, at least one value) quantized on its device; the input's values are
  // read in fp32.
  static Nf4Tensor quantize(const at::Tensor& w);
  // The values in `dtype` (fp32, bf16 or fp16), shape(), on this tensor's device.
  at::Tensor dequantize(at::ScalarType dtype) const;
  // The fp32 absmax of each 64-value block, from its 8-bit code (what dequantize multiplies by).
  at::Tensor absmax() const;
  // The same tensor on `device`.
  Nf4Tensor to(const at::Device& device) const;

  // The storage by rows of kRowValues values (256 blocks of 64: one fp32 scale's), the unit a layout may split
  // it by with no quantization block straddling two pieces (parallel/fsdp/fully_shard.h shards them): three
  // byte tensors of rows() rows — codes [R, 8192], absmax codes [R, 256], the scale's fp32 bytes [R, 4] — zero
  // past the end (a copy). over_rows() reads such rows back: this tensor's shape, map and offset over their
  // storage (views: no copy; storage released and refilled later is seen through them).
  static constexpr int64_t kRowValues = kBlock * kAbsmaxBlock;
  // Bytes of a row in each of as_rows()' three tensors: codes, absmax codes, the scale.
  static constexpr std::array<int64_t, 3> kRowBytes{kRowValues / 2, kAbsmaxBlock, 4};
  int64_t rows() const { return absmax_scales.numel(); }
  std::vector<at::Tensor> as_rows() const;
  Nf4Tensor over_rows(const std::vector<at::Tensor>& rows) const;

  int64_t numel() const;
  int64_t blocks() const { return absmax_codes.numel(); }
  // Bytes held: codes, absmax codes, their scales (and offset).
  int64_t bytes() const;
  at::Device device() const { return codes.device(); }

  std::vector<int64_t> shape;
  at::Tensor codes;          // uint8 [ceil(n / 2)]
  at::Tensor absmax_codes;   // uint8 [ceil(n / 64)]
  at::Tensor absmax_scales;  // fp32 [ceil(blocks / 256)]
  at::Tensor absmax_map;     // fp32 [256]: the dynamic map the absmax codes index
  float absmax_offset = 0.f;
};

}  // namespace meshtrain::model
