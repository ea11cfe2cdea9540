// Fused rotary embedding: one pass that reads x (q or k) and the fp32 cos/sin tables and writes the rotated
// result, where the composite apply_rope (rotary.cpp) runs a negation, a concatenation, two products and a
// sum, each a full pass over the activations. Each thread takes N consecutive pairs of one row.
#include <cuda_runtime.h>

#include <cstdint>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_rope_cuda.h"
#include "model/kernels/rope_pair.cuh"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;

// I: the thread-index type; 32-bit where the grid allows it, since 64-bit division is emulated and three
// of them per thread would cost as much as the memory traffic.
template <typename T, int N, typename I>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(bool backward, const T* __restrict__ x, T* __restrict__ y, RopeShape s,
                const float* __restrict__ cos, const float* __restrict__ sin, I total) {
  const I g = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= total) return;
  const int64_t half = s.hd / 2;
  const I chunks = static_cast<I>(half / N);
  const int64_t i = static_cast<int64_t>(g % chunks) * N;
  I rest = g / chunks;
  const int64_t t = rest % static_cast<I>(s.T);
  rest /= static_cast<I>(s.T);
  const int64_t h = rest % static_cast<I>(s.H), b = rest / static_cast<I>(s.H);
  const T* xr = x + b * s.xs[0] + h * s.xs[1] + t * s.xs[2];
  T* yr = y + b * s.ys[0] + h * s.ys[1] + t * s.ys[2];
  const Vec<T, N> x1 = *reinterpret_cast<const Vec<T, N>*>(xr + i);
  const Vec<T, N> x2 = *reinterpret_cast<const Vec<T, N>*>(xr + i + half);
  Vec<T, N> y1, y2;
  rope_rotate<T, N>(backward, x1, x2, rope_tables_at<N>(cos + t * s.hd, sin + t * s.hd, i, half), y1, y2);
  *reinterpret_cast<Vec<T, N>*>(yr + i) = y1;
  *reinterpret_cast<Vec<T, N>*>(yr + i + half) = y2;
}

template <typename T, int N>
LaunchError launch(bool backward, const T* x, T* y, const RopeShape& s, const float* cos, const float* sin,
                   cudaStream_t stream) {
  const int64_t total = s.B * s.H * s.T * (s.hd / 2 / N);
  if (total == 0) return nullptr;
  const auto blocks = static_cast<unsigned>((total + kThreads - 1) / kThreads);
  if (total + kThreads <= int64_t{UINT32_MAX})
    rope_kernel<T, N, uint32_t><<<blocks, kThreads, 0, stream>>>(backward, x, y, s, cos, sin,
                                                                  static_cast<uint32_t>(total));
  else
    rope_kernel<T, N, int64_t><<<blocks, kThreads, 0, stream>>>(backward, x, y, s, cos, sin, total);
  return launch_status();
}

// Whether every row start and the half-row offset allow N-element vectors for x, y and the tables.
template <typename T>
bool vectorizable(int n, const T* x, const T* y, const RopeShape& s, const float* cos, const float* sin) {
  if ((s.hd / 2) % n != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (s.xs[d] % n != 0 || s.ys[d] % n != 0) return false;
  return aligned(x, sizeof(T) * n) && aligned(y, sizeof(T) * n) && aligned(cos, sizeof(float) * n) &&
         aligned(sin, sizeof(float) * n);
}

}  // namespace

LaunchError rope(DType dt, bool backward, const void* x, void* y, const RopeShape& shape, const float* cos,
                 const float* sin, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    const auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    constexpr int N = kVec16<T>;
    if (vectorizable(N, xp, yp, shape, cos, sin)) return launch<T, N>(backward, xp, yp, shape, cos, sin, st);
    return launch<T, 1>(backward, xp, yp, shape, cos, sin, st);
  });
}

}  // namespace meshtrain::model::cuda
