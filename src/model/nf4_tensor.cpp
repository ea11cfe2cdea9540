// Nf4Tensor; see nf4_tensor.h.
#include "meshtrain/model/nf4_tensor.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>


#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/nf4_dequantize_cuda.h"
#endif

namespace meshtrain::model {
namespace {

// The levels as a tensor on `device` (fp32 [16]).
at::Tensor levels_on(const at::Device& device) {
  const auto& l = Nf4Tensor::levels();
  return at::tensor(at::ArrayRef<float>(l.data(), l.size()), at::TensorOptions().dtype(at::kFloat)).to(device);
}

struct Blockwise {
  at::Tensor codes;   // int32, one per value: the index into `code`
  at::Tensor absmax;  // fp32, one per block
};

// bitsandbytes' blockwise quantization onto the sorted map `code`: each block of `block` values scaled into
// [-1, 1] by its absmax (full blocks multiplied by the reciprocal, a short last block divided, as bitsandbytes
// computes them — the roundings that decide near-ties), then the nearest entry of `code`, ties to the lower.
// A block of zeros keeps absmax 0 (a short last one: the 1e-38 it was clamped to, also as bitsandbytes).
Blockwise quantize_blockwise(const at::Tensor& flat, const at::Tensor& code, int64_t block) {
  const int64_t n = flat.numel(), rem = n % block, full = n - rem;
  std::vector<at::Tensor> absmaxes, scaled;
  if (full > 0) {
    const auto blocks = flat.narrow(0, 0, full).view({full / block, block});
    auto am = blocks.abs().amax(1);
    scaled.push_back(at::clamp(blocks * (1.0 / am.clamp_min(1e-38)).view({-1, 1}), -1, 1).reshape(-1));
    absmaxes.push_back(am);
  }
  if (rem > 0) {
    const auto tail = flat.narrow(0, full, rem);
    auto am = tail.abs().max().clamp_min(1e-38);
    scaled.push_back(at::clamp(tail / am, -1, 1));
    absmaxes.push_back(am.unsqueeze(0));
  }
  const auto bounds = (code.narrow(0, 0, code.numel() - 1) + code.narrow(0, 1, code.numel() - 1)) / 2;
  return {at::bucketize(at::cat(scaled), bounds, /*out_int32=*/true), at::cat(absmaxes)};
}

}  // namespace

const std::array<float, 16>& Nf4Tensor::levels() {
  // create_normal_map(offset=0.9677083, use_extra_value=True) of bitsandbytes, rounded to fp32 (hex: exact).
  static const std::array<float, 16> l = {
      -0x1p+0f,         -0x1.647362p-1f, -0x1.0cd66p-1f,  -0x1.94654p-2f,  -0x1.23449ap-2f, -0x1.7a6a7ep-3f,
      -0x1.74f0e2p-4f,  0.0f,            0x1.45f5fep-4f,  0x1.4995c6p-3f,  0x1.f809bap-3f,  0x1.5a0674p-2f,
      0x1.c3497p-2f,    0x1.200f56p-1f,  0x1.722766p-1f,  0x1p+0f};
  return l;
}

at::Tensor Nf4Tensor::dynamic_map(const at::Device& device) {
  // bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8) as it computes it (torch's
  // fp32 linspace; for exponent i = 0..6 the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i − 6), both
  // signs; then 0 and 1), sorted. A fixed table, not computed here: the format must not depend on how a CPU's
  // vectorised linspace rounds (tests/reference/nf4_test.py checks it against the definition and bitsandbytes).
  static const float kMap[256] = {
      -0.99296874f, -0.9789063f, -0.96484375f, -0.9507812f, -0.93671876f, -0.92265624f, -0.9085938f, -0.89453125f,
      -0.8804687f, -0.86640626f, -0.85234374f, -0.8382813f, -0.82421875f, -0.8101562f, -0.79609376f, -0.78203124f,
      -0.7679688f, -0.75390625f, -0.7398437f, -0.72578126f, -0.7117188f, -0.6976563f, -0.68359375f, -0.6695312f,
      -0.65546876f, -0.6414063f, -0.6273438f, -0.61328125f, -0.5992187f, -0.58515626f, -0.5710938f, -0.5570313f,
      -0.54296875f, -0.5289062f, -0.5148437f, -0.50078124f, -0.4867187f, -0.47265625f, -0.45859373f, -0.44453126f,
      -0.43046874f, -0.41640624f, -0.40234375f, -0.38828123f, -0.37421876f, -0.36015624f, -0.34609374f, -0.33203125f,
      -0.31796873f, -0.30390626f, -0.28984374f, -0.27578127f, -0.26171875f, -0.24765624f, -0.23359375f, -0.21953125f,
      -0.20546874f, -0.19140625f, -0.17734376f, -0.16328125f, -0.14921875f, -0.13515624f, -0.12109375f, -0.107031256f,
      -0.09859375f, -0.09578126f, -0.092968754f, -0.09015625f, -0.08734375f, -0.08453125f, -0.08171876f, -0.07890625f,
      -0.07609375f, -0.07328125f, -0.070468746f, -0.067656256f, -0.06484375f, -0.06203125f, -0.059218753f, -0.05640625f,
      -0.05359375f, -0.05078125f, -0.04796875f, -0.04515625f, -0.042343747f, -0.03953125f, -0.036718752f, -0.03390625f,
      -0.03109375f, -0.028281251f, -0.02546875f, -0.02265625f, -0.019843752f, -0.01703125f, -0.01421875f, -0.01140625f,
      -0.00971875f, -0.009156249f, -0.00859375f, -0.00803125f, -0.00746875f, -0.00690625f, -0.00634375f, -0.00578125f,
      -0.0052187503f, -0.0046562497f, -0.00409375f, -0.0035312497f, -0.00296875f, -0.00240625f, -0.00184375f, -0.0012812499f,
      -0.0009437501f, -0.00083125f, -0.00071875006f, -0.0006062501f, -0.00049375003f, -0.00038125002f, -0.00026875004f, -0.00015625001f,
      -8.875e-05f, -6.625e-05f, -4.375e-05f, -2.1249998e-05f, -7.75e-06f, -3.2500002e-06f, -5.5000004e-07f, 0.0f,
      5.5000004e-07f, 3.2500002e-06f, 7.75e-06f, 2.1249998e-05f, 4.375e-05f, 6.625e-05f, 8.875e-05f, 0.00015625001f,
      0.00026875004f, 0.00038125002f, 0.00049375003f, 0.0006062501f, 0.00071875006f, 0.00083125f, 0.0009437501f, 0.0012812499f,
      0.00184375f, 0.00240625f, 0.00296875f, 0.0035312497f, 0.00409375f, 0.0046562497f, 0.0052187503f, 0.00578125f,
      0.00634375f, 0.00690625f, 0.00746875f, 0.00803125f, 0.00859375f, 0.009156249f, 0.00971875f, 0.01140625f,
      0.01421875f, 0.01703125f, 0.019843752f, 0.02265625f, 0.02546875f, 0.028281251f, 0.03109375f, 0.03390625f,
      0.036718752f, 0.03953125f, 0.042343747f, 0.04515625f, 0.04796875f, 0.05078125f, 0.05359375f, 0.05640625f,
      0.059218753f, 0.06203125f, 0.06484375f, 0.067656256f, 0.070468746f, 0.07328125f, 0.07609375f, 0.07890625f,
      0.08171876f, 0.08453125f, 0.08734375f, 0.09015625f, 0.092968754f, 0.09578126f, 0.09859375f, 0.107031256f,
      0.12109375f, 0.13515624f, 0.14921875f, 0.16328125f, 0.17734376f, 0.19140625f, 0.20546874f, 0.21953125f,
      0.23359375f, 0.24765624f, 0.26171875f, 0.27578127f, 0.28984374f, 0.30390626f, 0.31796873f, 0.33203125f,
      0.34609374f, 0.36015624f, 0.37421876f, 0.38828123f, 0.40234375f, 0.41640624f, 0.43046874f, 0.44453126f,
      0.45859373f, 0.47265625f, 0.4867187f, 0.50078124f, 0.5148437f, 0.5289062f, 0.54296875f, 0.5570313f,
      0.5710938f, 0.58515626f, 0.5992187f, 0.61328125f, 0.6273438f, 0.6414063f, 0.65546876f, 0.6695312f,
      0.68359375f, 0.6976563f, 0.7117188f, 0.72578126f, 0.7398437f, 0.75390625f, 0.7679688f, 0.78203124f,
      0.79609376f, 0.8101562f, 0.82421875f, 0.8382813f, 0.85234374f, 0.86640626f, 0.8804687f, 0.89453125f,
      0.9085938f, 0.92265624f, 0.93671876f, 0.9507812f, 0.96484375f, 0.9789063f, 0.99296874f, 1.0f,
  };
  const auto table = at::from_blob(const_cast<float*>(kMap), {256}, at::TensorOptions().dtype(at::kFloat));
  return table.to(device, /*non_blocking=*/false, /*copy=*/true);
}

Nf4Tensor Nf4Tensor::quantize(const at::Tensor& w) {
  MT_CHECK(w.numel() > 0, "Nf4Tensor::quantize: an empty tensor");
  MT_CHECK(w.is_floating_point(), "Nf4Tensor::quantize: a float tensor expected, got ", w.scalar_type());
  at::NoGradGuard no_grad;
  const c10::DeviceGuard guard(w.device());
  auto flat = w.detach().reshape(-1).to(at::kFloat);
  Nf4Tensor q;
  q.shape = w.sizes().vec();
  const Blockwise first = quantize_blockwise(flat, levels_on(w.device()), kBlock);
  auto idx = first.codes;
  // An odd count's last byte: its low nibble codes a 0 (level 7), as bitsandbytes pads the values with a zero.
  if (idx.numel() % 2) idx = at::constant_pad_nd(idx, {0, 1}, 7);
  const auto u = idx.to(at::kByte);
  q.codes = at::bitwise_or(at::bitwise_left_shift(u.slice(0, 0, u.numel(), 2), 4), u.slice(0, 1, u.numel(), 2));
  // Double quantization: the absmaxes less their mean, blockwise on the dynamic map.
  const auto offset = first.absmax.mean();
  q.absmax_offset = offset.item<float>();
  q.absmax_map = dynamic_map(w.device());
  const Blockwise second = quantize_blockwise(first.absmax - offset, q.absmax_map, kAbsmaxBlock);
  q.absmax_codes = second.codes.to(at::kByte);
  q.absmax_scales = second.absmax;
  return q;
}

at::Tensor Nf4Tensor::absmax() const {
  const int64_t b = blocks();
  const auto scale = absmax_scales.repeat_interleave(kAbsmaxBlock).narrow(0, 0, b);
  return absmax_map.index({absmax_codes.to(at::kLong)}) * scale + absmax_offset;
}

at::Tensor Nf4Tensor::dequantize(at::ScalarType dtype) const {
  MT_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
           "Nf4Tensor::dequantize: fp32, bf16 or fp16, not ", dtype);
  at::NoGradGuard no_grad;
  const c10::DeviceGuard guard(codes.device());
  const int64_t n = numel();
#if MESHTRAIN_CUDA_KERNELS
  if (codes.is_cuda()) {
    auto out = at::empty(shape, codes.options().dtype(dtype));
    cuda::check_launch(
        cuda::nf4_dequantize(codes.const_data_ptr<uint8_t>(), absmax_codes.const_data_ptr<uint8_t>(),
                             absmax_scales.const_data_ptr<float>(), absmax_map.const_data_ptr<float>(),
                             absmax_offset, n, cuda::dtype_of(out), out.mutable_data_ptr(), cuda::stream_of(out)),
        "NF4 dequantize");
    return out;
  }
#endif
  // Each byte's high nibble first; the levels looked up, times their block's absmax (fp32 products, rounded
  // once into `dtype`).
  const auto hi = at::bitwise_right_shift(codes, 4), lo = at::bitwise_and(codes, 15);
  const auto idx = at::stack({hi, lo}, 1).reshape(-1).narrow(0, 0, n).to(at::kLong);
  auto values = levels_on(codes.device()).index({idx});
  const auto scale = absmax().repeat_interleave(kBlock).narrow(0, 0, n);
  return (values * scale).to(dtype).view(shape);
}

Nf4Tensor Nf4Tensor::to(const at::Device& device) const {
  Nf4Tensor q = *this;
  q.codes = codes.to(device);
  q.absmax_codes = absmax_codes.to(device);
  q.absmax_scales = absmax_scales.to(device);
  q.absmax_map = absmax_map.to(device);
  return q;
}

std::vector<at::Tensor> Nf4Tensor::as_rows() const {
  at::NoGradGuard no_grad;
  const int64_t r = rows();
  auto padded = [r](const at::Tensor& t, int64_t width) {
    return at::constant_pad_nd(t.reshape(-1), {0, r * width - t.numel()}, 0).view({r, width});
  };
  return {padded(codes, kRowBytes[0]), padded(absmax_codes, kRowBytes[1]),
          absmax_scales.contiguous().view(at::kByte).view({r, kRowBytes[2]})};
}

Nf4Tensor Nf4Tensor::over_rows(const std::vector<at::Tensor>& rows) const {
  MT_CHECK(rows.size() == 3 && rows[0].size(0) == this->rows(), "Nf4Tensor::over_rows: 3 tensors of ", this->rows(),
           " rows expected");
  Nf4Tensor q = *this;
  q.codes = rows[0].view(-1).narrow(0, 0, codes.numel());
  q.absmax_codes = rows[1].view(-1).narrow(0, 0, absmax_codes.numel());
  q.absmax_scales = rows[2].view(-1).view(at::kFloat);
  return q;
}

int64_t Nf4Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Nf4Tensor::bytes() const {
  return codes.numel() + absmax_codes.numel() + absmax_scales.numel() * 4 + absmax_map.numel() * 4 + 4;
}

}  // namespace meshtrain::model
