// Fused SwiGLU: forward reads gate and up once and writes silu(gate)·up; backward reads ∂y, gate and up once
// and writes both gradients. Eager PyTorch runs silu and the product as two kernels, keeps silu(gate) alive
// for backward and spends three more passes there. Each thread takes N consecutive elements (16-byte
// accesses) where every buffer allows it, else one at a time; grid-stride over the rest.
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_swiglu_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// y is `chunks` chunks of N, rows of `row_chunks`; gate and up have their rows `in_row_chunks` apart (equal to
// row_chunks where they are contiguous, twice it for the halves of one [rows, 2·width] GEMM output).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ y, int64_t chunks,
                          int64_t row_chunks, int64_t in_row_chunks) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Contiguous inputs (training, and every caller but the fused inference GEMM) index directly: no 64-bit
    // division per chunk on the training path.
    const int64_t row = in_row_chunks == row_chunks ? 0 : c / row_chunks;
    const int64_t at = in_row_chunks == row_chunks ? c : row * in_row_chunks + (c - row * row_chunks);
    const Vec<T, N> g = reinterpret_cast<const Vec<T, N>*>(gate)[at];
    const Vec<T, N> u = reinterpret_cast<const Vec<T, N>*>(up)[at];
    Vec<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float a = to_float(g.v[k]);
      out.v[k] = from_float<T>(a * sigmoid(a) * to_float(u.v[k]));
    }
    reinterpret_cast<Vec<T, N>*>(y)[c] = out;
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ gate, const T* __restrict__ up,
                           T* __restrict__ dgate, T* __restrict__ dup, int64_t chunks) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Vec<T, N> d = reinterpret_cast<const Vec<T, N>*>(dy)[c];
    const Vec<T, N> g = reinterpret_cast<const Vec<T, N>*>(gate)[c];
    const Vec<T, N> u = reinterpret_cast<const Vec<T, N>*>(up)[c];
    Vec<T, N> dg, du;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float a = to_float(g.v[k]), b = to_float(u.v[k]), e = to_float(d.v[k]);
      const float s = sigmoid(a);
      du.v[k] = from_float<T>(e * a * s);
      dg.v[k] = from_float<T>(e * b * s * (1.f + a * (1.f - s)));
    }
    reinterpret_cast<Vec<T, N>*>(dgate)[c] = dg;
    reinterpret_cast<Vec<T, N>*>(dup)[c] = du;
  }
}

unsigned blocks_for(int64_t chunks) {
  return static_cast<unsigned>(std::min<int64_t>(kMaxBlocks, (chunks + kThreads - 1) / kThreads));
}

template <typename T>
bool vectorizable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % kVec16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned(p, 16)) return false;
  return true;
}

}  // namespace

LaunchError swiglu_forward(DType dt, const void* gate, const void* up, void* y, int64_t rows, int64_t width,
                           int64_t in_row_stride, void* stream) {
  const int64_t n = rows * width;
  if (n == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = kVec16<T>;
    const auto* g = static_cast<const T*>(gate);
    const auto* u = static_cast<const T*>(up);
    auto* out = static_cast<T*>(y);
    if (vectorizable<T>(width, {gate, up, y}) && in_row_stride % N == 0)
      swiglu_forward_kernel<T, N>
          <<<blocks_for(n / N), kThreads, 0, st>>>(g, u, out, n / N, width / N, in_row_stride / N);
    else
      swiglu_forward_kernel<T, 1><<<blocks_for(n), kThreads, 0, st>>>(g, u, out, n, width, in_row_stride);
    return launch_status();
  });
}

LaunchError swiglu_backward(DType dt, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                            int64_t n, void* stream) {
  if (n == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = kVec16<T>;
    const auto* d = static_cast<const T*>(dy);
    const auto* g = static_cast<const T*>(gate);
    const auto* u = static_cast<const T*>(up);
    auto* dg = static_cast<T*>(dgate);
    auto* du = static_cast<T*>(dup);
    if (vectorizable<T>(n, {dy, gate, up, dgate, dup}))
      swiglu_backward_kernel<T, N><<<blocks_for(n / N), kThreads, 0, st>>>(d, g, u, dg, du, n / N);
    else
      swiglu_backward_kernel<T, 1><<<blocks_for(n), kThreads, 0, st>>>(d, g, u, dg, du, n);
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
