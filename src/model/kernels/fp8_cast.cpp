#include "meshtrain/model/kernels/fp8_cast.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <cmath>
#include <utility>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"
#include "model/kernels/fp8_delayed_state.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fp8_cast_cuda.h"
#endif

namespace meshtrain::model {
namespace {

double fp8_max(at::ScalarType fmt) { return fmt == at::kFloat8_e4m3fn ? 448.0 : 57344.0; }

bool wants_rowmajor(Fp8Copies c) { return c != Fp8Copies::transposed; }
bool wants_transposed(Fp8Copies c) { return c != Fp8Copies::rowmajor; }

void check_args(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt) {
  MT_CHECK(t.dim() == 2, "fp8_cast: t [R, C]; got ", t.sizes());
  MT_CHECK(scaling == Fp8Scaling::tensorwise || scaling == Fp8Scaling::rowwise, "fp8_cast: scaling ", scaling,
           " (tensorwise or rowwise; delayed scaling casts through fp8_cast_delayed)");
  MT_CHECK(fmt == at::kFloat8_e4m3fn || fmt == at::kFloat8_e5m2, "fp8_cast: format ", fmt, " (e4m3fn or e5m2)");
}

// One copy, t [R, C] scaled per tensor or per row. The scale is rounded to t's dtype before the multiply (no
// fp32 copy of a bf16 tensor), and the inverse is taken of that rounded scale: the one the GEMM undoes is the
// one that was applied.
std::pair<at::Tensor, at::Tensor> quantize_from(const at::Tensor& t, const at::Tensor& amax, at::ScalarType fmt) {
  auto scale = (fp8_max(fmt) / amax.to(at::kFloat).clamp_min(1e-12)).to(t.scalar_type());
  auto q = (t * scale).clamp(-fp8_max(fmt), fp8_max(fmt)).to(fmt);
  return {q, scale.to(at::kFloat).reciprocal()};
}

std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& t, bool per_row, at::ScalarType fmt) {
  return quantize_from(t, per_row ? t.abs().amax({1}, /*keepdim=*/true) : t.abs().max(), fmt);
}

void check_delayed_args(const at::Tensor& t, at::ScalarType fmt, const at::Tensor& state) {
  check_args(t, Fp8Scaling::tensorwise, fmt);
  MT_CHECK(t.numel() > 0, "fp8_cast_delayed: an empty tensor has no amax to record");
  MT_CHECK(state.scalar_type() == at::kInt && state.dim() == 1 && state.numel() == kDelayedStateInts &&
               state.is_contiguous() && state.device() == t.device(),
           "fp8_cast_delayed: state int32 [", kDelayedStateInts, "] contiguous on ", t.device(), "; got ",
           state.scalar_type(), " ", state.sizes(), " on ", state.device());
}

// The state's amax slots as fp32 (a view of their bits).
at::Tensor amax_slots(const at::Tensor& state) {
  return state.narrow(0, kDelayedFirstSlot, kAmaxSlots).view(at::kFloat);
}

#if MESHTRAIN_CUDA_KERNELS
cuda::Fp8Format kernel_format(at::ScalarType fmt) {
  return fmt == at::kFloat8_e4m3fn ? cuda::Fp8Format::kE4M3 : cuda::Fp8Format::kE5M2;
}

// The copies `copies` asks for, empty, for the cast kernel to write: q [R, C] and qt [C, R] in `fmt`, each with its
// inverse scales ([lines, 1] per_line, else one); and their kernel outputs, scaled from `rows_amax` and `cols_amax`
// (the tensor's for both where one scale; null under delayed scaling, whose kernel takes its own).
struct Fp8Outputs {
  Fp8Cast cast;
  cuda::Fp8Out rowmajor, transposed;
};
Fp8Outputs empty_outputs(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, bool per_line,
                         const float* rows_amax, const float* cols_amax) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const auto f32 = t.options().dtype(at::kFloat);
  const auto inv = [&](int64_t lines) { return per_line ? at::empty({lines, 1}, f32) : at::empty({}, f32); };
  Fp8Outputs o;
  Fp8Cast& c = o.cast;
  if (wants_rowmajor(copies)) {
    c.q = at::empty({rows, cols}, t.options().dtype(fmt));
    c.inv_scale = inv(rows);
    o.rowmajor = {c.q.mutable_data_ptr(), c.inv_scale.mutable_data_ptr<float>(), rows_amax, per_line};
  }
  if (wants_transposed(copies)) {
    c.qt = at::empty({cols, rows}, t.options().dtype(fmt));
    c.inv_scale_t = inv(cols);
    o.transposed = {c.qt.mutable_data_ptr(), c.inv_scale_t.mutable_data_ptr<float>(), cols_amax, per_line};
  }
  return o;
}

const float* data_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr<float>() : nullptr; }

// Both kernels; t contiguous, fp32 or bf16, on CUDA.
Fp8Cast cast_with_kernels(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt, Fp8Copies copies) {
  const c10::DeviceGuard guard(t.device());
  const bool rowwise = scaling == Fp8Scaling::rowwise, rm = wants_rowmajor(copies), tr = wants_transposed(copies);
  const int64_t rows = t.size(0), cols = t.size(1);
  const auto f = kernel_format(fmt);
  if (rowwise && !tr) {  // one kernel: each row's maximum and cast (fp8_cast_rows)
    Fp8Cast c{at::empty({rows, cols}, t.options().dtype(fmt)), at::empty({rows, 1}, t.options().dtype(at::kFloat))};
    cuda::check_launch(cuda::fp8_cast_rows(cuda::dtype_of(t), f, t.const_data_ptr(), rows, cols, c.q.mutable_data_ptr(),
                                           c.inv_scale.mutable_data_ptr<float>(), cuda::stream_of(t)),
                       "FP8 row cast");
    return c;
  }
  const Fp8Amax amax = fp8_amax(t, !rowwise, rowwise && rm, rowwise && tr);
  auto o = rowwise ? empty_outputs(t, fmt, copies, true, data_or_null(amax.rows), data_or_null(amax.cols))
                   : empty_outputs(t, fmt, copies, false, data_or_null(amax.tensor), data_or_null(amax.tensor));
  cuda::check_launch(cuda::fp8_cast(cuda::dtype_of(t), f, t.const_data_ptr(), rows, cols, o.rowmajor, o.transposed,
                                    cuda::stream_of(t)),
                     "FP8 cast");
  return o.cast;
}

// Delayed scaling: one pass (two for the site's first cast, whose slot, slot 0, a pass of fp8_amax fills).
Fp8Cast cast_delayed_with_kernels(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, const at::Tensor& state,
                                  bool first) {
  const c10::DeviceGuard guard(t.device());
  const int64_t rows = t.size(0), cols = t.size(1);
  int* st = state.mutable_data_ptr<int>();
  if (first)
    cuda::check_launch(cuda::fp8_amax(cuda::dtype_of(t), t.const_data_ptr(), rows, cols,
                                      {reinterpret_cast<float*>(st + kDelayedFirstSlot), nullptr, nullptr},
                                      cuda::stream_of(t)),
                       "FP8 amax");
  auto o = empty_outputs(t, fmt, copies, false, nullptr, nullptr);
  cuda::check_launch(cuda::fp8_cast(cuda::dtype_of(t), kernel_format(fmt), t.const_data_ptr(), rows, cols, o.rowmajor,
                                    o.transposed, cuda::stream_of(t), {st, first}),
                     "FP8 delayed cast");
  return o.cast;
}
#endif

}  // namespace

Fp8Amax fp8_amax(const at::Tensor& t, bool tensor, bool rows, bool cols) {
  MT_CHECK(t.dim() == 2, "fp8_amax: t [R, C]; got ", t.sizes());
  const at::NoGradGuard no_grad;  // a cast's inputs are not differentiated through it (fp8_linear's are by hand)
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({t})) {
    const c10::DeviceGuard guard(t.device());
    const auto x = t.contiguous();
    const auto f32 = t.options().dtype(at::kFloat);
    Fp8Amax a;
    if (tensor) a.tensor = at::empty({}, f32);
    if (rows) a.rows = at::empty({t.size(0)}, f32);
    if (cols) a.cols = at::empty({t.size(1)}, f32);
    const auto ptr = [](const at::Tensor& m) { return m.defined() ? m.mutable_data_ptr<float>() : nullptr; };
    cuda::check_launch(cuda::fp8_amax(cuda::dtype_of(x), x.const_data_ptr(), x.size(0), x.size(1),
                                      {ptr(a.tensor), ptr(a.rows), ptr(a.cols)}, cuda::stream_of(x)),
                       "FP8 amax");
    return a;
  }
#endif
  const auto abs = t.abs();
  Fp8Amax a;
  if (tensor) a.tensor = abs.max().to(at::kFloat);
  if (rows) a.rows = abs.amax({1}).to(at::kFloat);
  if (cols) a.cols = abs.amax({0}).to(at::kFloat);
  return a;
}

Fp8Cast fp8_cast(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt, Fp8Copies copies) {
  check_args(t, scaling, fmt);
  const at::NoGradGuard no_grad;
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({t}) && t.numel() > 0) return cast_with_kernels(t.contiguous(), scaling, fmt, copies);
#endif
  return fp8_cast_composite(t, scaling, fmt, copies);
}

Fp8Cast fp8_cast_composite(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt, Fp8Copies copies) {
  check_args(t, scaling, fmt);
  const at::NoGradGuard no_grad;
  const bool rowwise = scaling == Fp8Scaling::rowwise;
  Fp8Cast c;
  if (wants_rowmajor(copies)) std::tie(c.q, c.inv_scale) = quantize(t.contiguous(), rowwise, fmt);
  // The transpose's rows are t's columns: rowwise, each scaled from its own column.
  if (wants_transposed(copies)) std::tie(c.qt, c.inv_scale_t) = quantize(t.t().contiguous(), rowwise, fmt);
  return c;
}

int64_t fp8_delayed_state_size() { return kDelayedStateInts; }

Fp8Cast fp8_cast_delayed(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, const at::Tensor& state,
                         bool first) {
  check_delayed_args(t, fmt, state);
  const at::NoGradGuard no_grad;
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({t})) return cast_delayed_with_kernels(t.contiguous(), fmt, copies, state, first);
#endif
  return fp8_cast_delayed_composite(t, fmt, copies, state, first);
}

Fp8Cast fp8_cast_delayed_composite(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, const at::Tensor& state,
                                   bool first) {
  check_delayed_args(t, fmt, state);
  const at::NoGradGuard no_grad;
  const int calls = state[kDelayedCalls].item<int>();
  MT_CHECK(first == (calls == 0), "fp8_cast_delayed: first ", first, " for a state after ", calls, " casts");
  const int write = calls % kAmaxSlots;
  const auto slots = amax_slots(state);
  // Recorded as the kernel's atomic maximum on the bits orders them: a NaN (one bit pattern) above everything.
  const float amax = t.abs().max().item<float>(), held = slots[write].item<float>();
  if (std::isnan(amax))
    state[kDelayedFirstSlot + write].fill_(kAmaxNanBits);
  else if (!std::isnan(held) && amax > held)
    slots[write].fill_(amax);
  auto in_window = at::ones({kAmaxSlots}, state.options().dtype(at::kBool));
  if (!first) in_window[write] = false;
  const auto window = at::where(in_window & slots.isfinite(), slots, at::zeros_like(slots)).max();
  Fp8Cast c;
  if (wants_rowmajor(copies)) std::tie(c.q, c.inv_scale) = quantize_from(t.contiguous(), window, fmt);
  if (wants_transposed(copies)) std::tie(c.qt, c.inv_scale_t) = quantize_from(t.t().contiguous(), window, fmt);
  state[kDelayedCalls].fill_(calls + 1);
  slots[(calls + 1) % kAmaxSlots].zero_();
  return c;
}

}  // namespace meshtrain::model
