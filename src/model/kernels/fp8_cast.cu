// The FP8 casts of train.fp8 in two passes over the input: the absolute maxima (fp8_amax), then the scaled,
// saturated cast (fp8_cast), which can write the transposed copy from the same read, so the backward's
// column-major operands need no copy of their own. The composite ATen ops take five passes for one copy (|x|,
// amax, the multiply, the clamp, the cast) and two more for a transposed one. A row-scaled row-major copy alone
// (an inference GEMM's input, a few rows a decode step) is one kernel, fp8_cast_rows: a block per row finds its
// maximum and casts the row.
//
// Tiles. fp8_amax: a block of 8 warps covers 64 rows × 256 columns; a lane reads 8 consecutive elements of a
// row (one 16-byte access for bf16), a row's maximum is a warp reduce, a column's a reduce over the warps in
// shared memory; each lands in global memory by an atomicMax on the float's bits (a non-negative float orders
// like its bits as an int; NaN, all bits above +inf, wins, as ATen's max propagates it). fp8_cast: a block
// covers 64 × 64; a thread reads 8 consecutive elements of a row and writes them as FP8 (8 bytes), keeping
// them in a padded shared tile, then writes 8 consecutive elements of a column of it as a row of the
// transposed copy. Both kernels take one element at a time, with bounds checks, where sizes or alignment do
// not allow whole vectors.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fp8_cast_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kV = 8;                  // elements per thread access
constexpr int kAmaxRows = 64;          // rows per fp8_amax block
constexpr int kAmaxCols = 32 * kV;     // columns per fp8_amax block: one warp's row
constexpr int kTile = 64;              // rows and columns per fp8_cast block
constexpr int kLineThreads = kTile / kV;  // threads per row of an fp8_cast tile
static_assert(kAmaxCols == kThreads, "fp8_amax: one thread per column of the block for the column reduce");
static_assert(kThreads % kLineThreads == 0 && kTile % (kThreads / kLineThreads) == 0, "fp8_cast tile");

// max that keeps a NaN from either side (ATen's amax propagates NaN).
__device__ __forceinline__ float max_nan(float m, float v) { return (v > m || v != v) ? v : m; }

__device__ __forceinline__ float warp_max(float m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

// The largest of every thread's m in the block (a NaN wins), to every thread. warp_part: kWarps floats of shared
// memory; the same for the whole block, as is the barrier inside.
__device__ __forceinline__ float block_max(float m, float* warp_part) {
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = m;
  __syncthreads();
  float b = warp_part[0];
  for (int w = 1; w < kWarps; ++w) b = max_nan(b, warp_part[w]);
  return b;
}

// v ≥ 0 (or +NaN): its bits order as an int does.
__device__ __forceinline__ void atomic_max(float* p, float v) {
  atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
}

// x[r][c .. c+kV) as floats, zero outside the tensor. kVec: one aligned vector access, cols % kV == 0.
template <typename T, bool kVec>
__device__ __forceinline__ void load_row(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t r, int64_t c,
                                         float (&v)[kV]) {
  if constexpr (kVec) {
    if (r < rows && c < cols) {
      const Vec<T, kV> a = *reinterpret_cast<const Vec<T, kV>*>(x + r * cols + c);
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = to_float(a.v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = 0.f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = r < rows && c + k < cols ? to_float(x[r * cols + c + k]) : 0.f;
  }
}

// line[c .. c+kV) = b where inside the line's n elements. kVec: one aligned 8-byte store, n % kV == 0.
template <bool kVec>
__device__ __forceinline__ void store_line(uint8_t* __restrict__ line, int64_t n, int64_t c,
                                           const Vec<uint8_t, kV>& b) {
  if constexpr (kVec) {
    if (c < n) *reinterpret_cast<Vec<uint8_t, kV>*>(line + c) = b;
  } else {
#pragma unroll
    for (int k = 0; k < kV; ++k)
      if (c + k < n) line[c + k] = b.v[k];
  }
}

template <Fp8Format F>
constexpr float fp8_max() {
  return F == Fp8Format::kE4M3 ? 448.f : 57344.f;
}

// The composite's scale, bit for bit: (fmax / amax.clamp_min(1e-12)).to(dtype), an IEEE fp32 division (ATen
// divides a tensor filled with the scalar by the tensor) rounded once to the input's dtype.
template <typename T, Fp8Format F>
__device__ __forceinline__ float scale_from(float amax) {
  return to_float(from_float<T>(fp8_max<F>() / max_nan(1e-12f, amax)));
}

// The composite's (x · scale) in x's dtype, then saturated and cast (round to nearest even).
template <typename T, Fp8Format F>
__device__ __forceinline__ uint8_t quantize(float x, float scale) {
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float_to_fp8(to_float(from_float<T>(x * scale)), __NV_SATFINITE, kind);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    fp8_amax_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, Fp8Amax out) {
  __shared__ float col_part[kWarps][kAmaxCols];
  __shared__ float warp_part[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kAmaxRows;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kAmaxCols + lane * kV;
  float cm[kV];
#pragma unroll
  for (int k = 0; k < kV; ++k) cm[k] = 0.f;
  float tm = 0.f;
  for (int i = warp; i < kAmaxRows && r0 + i < rows; i += kWarps) {  // the bound is the same for a whole warp
    float v[kV];
    load_row<T, kVec>(x, rows, cols, r0 + i, c, v);
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const float a = fabsf(v[k]);
      cm[k] = max_nan(cm[k], a);
      m = max_nan(m, a);
    }
    tm = max_nan(tm, m);
    if (out.rows != nullptr) {
      m = warp_max(m);
      if (lane == 0) atomic_max(out.rows + r0 + i, m);
    }
  }
  if (out.cols != nullptr) {  // the same for the whole block, as are the barriers under it
#pragma unroll
    for (int k = 0; k < kV; ++k) col_part[warp][lane * kV + k] = cm[k];
    __syncthreads();
    const int64_t col = static_cast<int64_t>(blockIdx.y) * kAmaxCols + threadIdx.x;
    if (col < cols) {
      float m = col_part[0][threadIdx.x];
      for (int w = 1; w < kWarps; ++w) m = max_nan(m, col_part[w][threadIdx.x]);
      atomic_max(out.cols + col, m);
    }
  }
  if (out.tensor != nullptr) {
    tm = block_max(tm, warp_part);
    if (threadIdx.x == 0) atomic_max(out.tensor, tm);
  }
}

// Delayed scaling (fp8_cast_cuda.h, Fp8Delayed): the amax the scale comes from, the largest finite one in the
// window (the slot this cast records into left out unless it was filled by a pass over this tensor first).
__device__ __forceinline__ float window_amax(const Fp8Delayed& d) {
  const int write = d.state[kDelayedCalls] % kAmaxSlots;
  float m = 0.f;
  for (int i = 0; i < kAmaxSlots; ++i) {
    const float a = __int_as_float(d.state[kDelayedFirstSlot + i]);
    if ((i != write || d.include_current) && isfinite(a)) m = fmaxf(m, a);
  }
  return m;
}

// Delayed scaling: the block's amax into this cast's slot; the block that finishes last moves the state on to the
// next cast (its count, and the slot it will record into emptied: the oldest, which this cast's window read).
// Every thread of the block calls it, with the largest |x| it read.
__device__ __forceinline__ void record_amax(const Fp8Delayed& d, float m, float* warp_part) {
  m = block_max(m, warp_part);
  if (threadIdx.x != 0) return;
  if (m != m) m = __int_as_float(kAmaxNanBits);  // one NaN, whatever the input's payload
  const int calls = d.state[kDelayedCalls];
  atomic_max(reinterpret_cast<float*>(d.state + kDelayedFirstSlot + calls % kAmaxSlots), m);
  __threadfence();  // the maximum lands before the count of finished blocks says so
  const unsigned blocks = gridDim.x * gridDim.y;
  if (atomicAdd(reinterpret_cast<unsigned*>(d.state + kDelayedBlocksDone), 1u) + 1 != blocks) return;
  d.state[kDelayedBlocksDone] = 0;
  d.state[kDelayedCalls] = calls + 1;
  d.state[kDelayedFirstSlot + (calls + 1) % kAmaxSlots] = 0;
}

template <typename T, Fp8Format F, bool kVec, bool kDelayed>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, Fp8Out rm, Fp8Out tr, Fp8Delayed d) {
  // +1 column: a thread's 8 elements down a column, and a row's 8 across, fall in distinct banks per warp.
  __shared__ float tile[kTile][kTile + 1];
  __shared__ float warp_part[kWarps];
  const int off = (threadIdx.x % kLineThreads) * kV;  // first column read, first row written transposed
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  auto* q = static_cast<uint8_t*>(rm.q);
  float delayed_amax = 0.f, seen = 0.f;  // kDelayed: the window's amax, and the largest |x| this thread read
  if constexpr (kDelayed) delayed_amax = window_amax(d);
  // One scale per tensor (tensorwise, delayed) or per line of the copy (rowwise).
  const auto scale_of = [&](const Fp8Out& o, int64_t line) {
    return scale_from<T, F>(kDelayed ? delayed_amax : o.amax[o.per_line ? line : 0]);
  };
  for (int i = threadIdx.x / kLineThreads; i < kTile; i += kThreads / kLineThreads) {
    const int64_t r = r0 + i;
    float v[kV];
    load_row<T, kVec>(x, rows, cols, r, c0 + off, v);
    if constexpr (kDelayed) {
#pragma unroll
      for (int k = 0; k < kV; ++k) seen = max_nan(seen, fabsf(v[k]));
    }
    if (tr.q != nullptr) {
#pragma unroll
      for (int k = 0; k < kV; ++k) tile[i][off + k] = v[k];
    }
    if (q != nullptr && r < rows) {
      const float s = scale_of(rm, r);
      Vec<uint8_t, kV> b;
#pragma unroll
      for (int k = 0; k < kV; ++k) b.v[k] = quantize<T, F>(v[k], s);
      store_line<kVec>(q + r * cols, cols, c0 + off, b);
      if (blockIdx.y == 0 && off == 0 && (rm.per_line || r == 0)) rm.inv_scale[rm.per_line ? r : 0] = 1.f / s;
    }
  }
  if constexpr (kDelayed) record_amax(d, seen, warp_part);  // its barrier also orders the tile's writes
  if (tr.q == nullptr) return;  // the same for the whole block
  __syncthreads();
  auto* qt = static_cast<uint8_t*>(tr.q);
  for (int j = threadIdx.x / kLineThreads; j < kTile && c0 + j < cols; j += kThreads / kLineThreads) {
    const int64_t c = c0 + j;
    const float s = scale_of(tr, c);
    Vec<uint8_t, kV> b;
#pragma unroll
    for (int k = 0; k < kV; ++k) b.v[k] = quantize<T, F>(tile[off + k][j], s);
    store_line<kVec>(qt + c * rows, rows, r0 + off, b);
    if (blockIdx.x == 0 && off == 0 && (tr.per_line || c == 0)) tr.inv_scale[tr.per_line ? c : 0] = 1.f / s;
  }
}

// One block per row: the row's maximum (a block reduce), then the row's cast from a second read of it (from cache:
// a row is at most a few tens of KB). One launch where the two kernels above take two and a memset.
template <typename T, Fp8Format F, bool kVec>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_rows_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, uint8_t* __restrict__ q,
                         float* __restrict__ inv_scale) {
  __shared__ float warp_part[kWarps];
  const int64_t r = blockIdx.x;
  float m = 0.f;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * kV; c < cols; c += kThreads * kV) {
    float v[kV];
    load_row<T, kVec>(x, rows, cols, r, c, v);
#pragma unroll
    for (int k = 0; k < kV; ++k) m = max_nan(m, fabsf(v[k]));
  }
  const float s = scale_from<T, F>(block_max(m, warp_part));
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * kV; c < cols; c += kThreads * kV) {
    float v[kV];
    load_row<T, kVec>(x, rows, cols, r, c, v);
    Vec<uint8_t, kV> b;
#pragma unroll
    for (int k = 0; k < kV; ++k) b.v[k] = quantize<T, F>(v[k], s);
    store_line<kVec>(q + r * cols, cols, c, b);
  }
  if (threadIdx.x == 0) inv_scale[r] = 1.f / s;
}

LaunchError zero(float* p, int64_t n, cudaStream_t st) {
  if (p == nullptr || n == 0) return nullptr;
  return cuda_error(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), st));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

LaunchError fp8_amax(DType dt, const void* x, int64_t rows, int64_t cols, Fp8Amax out, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (LaunchError e = zero(out.tensor, 1, st)) return e;
  if (LaunchError e = zero(out.rows, rows, st)) return e;
  if (LaunchError e = zero(out.cols, cols, st)) return e;
  if (rows == 0 || cols == 0) return nullptr;
  if (ceil_div(cols, kAmaxCols) > 65535) return "fp8_amax: more columns than one grid dimension takes";
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, kAmaxRows)), static_cast<unsigned>(ceil_div(cols, kAmaxCols)));
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    if (cols % kV == 0 && aligned(x, kV * sizeof(T)))
      fp8_amax_kernel<T, true><<<grid, kThreads, 0, st>>>(xt, rows, cols, out);
    else
      fp8_amax_kernel<T, false><<<grid, kThreads, 0, st>>>(xt, rows, cols, out);
    return launch_status();
  });
}

LaunchError fp8_cast(DType dt, Fp8Format fmt, const void* x, int64_t rows, int64_t cols, Fp8Out rowmajor,
                     Fp8Out transposed, void* stream, Fp8Delayed delayed) {
  if (rows == 0 || cols == 0 || (rowmajor.q == nullptr && transposed.q == nullptr)) return nullptr;
  if (ceil_div(cols, kTile) > 65535) return "fp8_cast: more columns than one grid dimension takes";
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)), static_cast<unsigned>(ceil_div(cols, kTile)));
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const bool vec = rows % kV == 0 && cols % kV == 0 && aligned(x, kV * sizeof(T)) &&
                     (rowmajor.q == nullptr || aligned(rowmajor.q, kV)) &&
                     (transposed.q == nullptr || aligned(transposed.q, kV));
    const auto launch = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, st>>>(xt, rows, cols, rowmajor, transposed, delayed);
    };
    // The format, the vector path and delayed scaling, each a template argument.
    const auto with_delay = [&](auto fmt_tag, auto vec_tag) {
      constexpr Fp8Format kF = decltype(fmt_tag)::value;
      constexpr bool kVec = decltype(vec_tag)::value;
      if (delayed.state != nullptr)
        launch(fp8_cast_kernel<T, kF, kVec, true>);
      else
        launch(fp8_cast_kernel<T, kF, kVec, false>);
    };
    const auto with_vec = [&](auto fmt_tag) {
      vec ? with_delay(fmt_tag, std::true_type{}) : with_delay(fmt_tag, std::false_type{});
    };
    if (fmt == Fp8Format::kE4M3)
      with_vec(std::integral_constant<Fp8Format, Fp8Format::kE4M3>{});
    else
      with_vec(std::integral_constant<Fp8Format, Fp8Format::kE5M2>{});
    return launch_status();
  });
}

LaunchError fp8_cast_rows(DType dt, Fp8Format fmt, const void* x, int64_t rows, int64_t cols, void* q,
                          float* inv_scale, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  if (rows > 2147483647) return "fp8_cast_rows: more rows than one grid dimension takes";
  const auto st = static_cast<cudaStream_t>(stream);
  const auto grid = static_cast<unsigned>(rows);
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    auto* qb = static_cast<uint8_t*>(q);
    const bool vec = cols % kV == 0 && aligned(x, kV * sizeof(T)) && aligned(q, kV);
    const auto launch = [&](auto kernel) { kernel<<<grid, kThreads, 0, st>>>(xt, rows, cols, qb, inv_scale); };
    if (fmt == Fp8Format::kE4M3)
      vec ? launch(fp8_cast_rows_kernel<T, Fp8Format::kE4M3, true>)
          : launch(fp8_cast_rows_kernel<T, Fp8Format::kE4M3, false>);
    else
      vec ? launch(fp8_cast_rows_kernel<T, Fp8Format::kE5M2, true>)
          : launch(fp8_cast_rows_kernel<T, Fp8Format::kE5M2, false>);
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
