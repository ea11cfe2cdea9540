// Fused softmax cross-entropy kernels (llm.c's "fused classifier"): one block per row of logits, fp32 math
// on bf16 or fp32 storage. Forward reads each logit once (online max and sum of exponentials per thread,
// then one block reduction); backward reads it once more and writes the gradient, in place if asked.
#include <cuda_runtime.h>

#include <cmath>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_cross_entropy_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 512;

// Running (max, Σ exp(x − max)) pairs: merged so that neither overflows nor loses the smaller side.
struct MaxSum {
  float m = -INFINITY;
  float s = 0.f;

  __device__ __forceinline__ void merge(float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;  // both empty (or all −inf): nothing to add
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
  template <int N>
  __device__ __forceinline__ void add(const float (&x)[N]) {
    float cm = x[0];
#pragma unroll
    for (int k = 1; k < N; ++k) cm = fmaxf(cm, x[k]);
    if (cm == -INFINITY) return;
    if (cm > m) {
      s *= expf(m - cm);
      m = cm;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) s += expf(x[k] - m);
  }
};

// The block's combined (max, sum), returned to every thread.
__device__ MaxSum block_reduce(MaxSum v) {
  __shared__ float sm[32], ss[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    v.merge(__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off));
  if (lane == 0) {
    sm[warp] = v.m;
    ss[warp] = v.s;
  }
  __syncthreads();
  const int warps = blockDim.x / 32;
  MaxSum w;
  if (lane < warps) {
    w.m = sm[lane];
    w.s = ss[lane];
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    w.merge(__shfl_xor_sync(0xffffffffu, w.m, off), __shfl_xor_sync(0xffffffffu, w.s, off));
  return w;
}

// Elements before the first 16-byte boundary of a row starting at `p` (rows of an odd-sized vocabulary
// start anywhere): handled one by one, the rest in 16-byte vectors.
template <typename T>
__device__ __forceinline__ int64_t head_len(const T* p, int64_t n) {
  constexpr int V = kVec16<T>;
  const int64_t mis = static_cast<int64_t>((reinterpret_cast<uintptr_t>(p) / sizeof(T)) % V);
  return mis == 0 ? 0 : min(n, static_cast<int64_t>(V) - mis);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(const T* __restrict__ logits, int64_t V, int64_t stride,
                                 const int64_t* __restrict__ targets, int64_t ignore_index, float* __restrict__ loss,
                                 float* __restrict__ lse) {
  constexpr int N = kVec16<T>;
  const int64_t r = blockIdx.x;
  const T* row = logits + r * stride;
  MaxSum acc;
  const int64_t head = head_len(row, V);
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) acc.add<1>({to_float(row[j])});
  const int64_t nvec = (V - head) / N;
  const auto* vrow = reinterpret_cast<const Vec<T, N>*>(row + head);
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, N> pack = vrow[i];
    float x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = to_float(pack.v[k]);
    acc.add<N>(x);
  }
  for (int64_t j = head + nvec * N + threadIdx.x; j < V; j += blockDim.x) acc.add<1>({to_float(row[j])});
  const MaxSum total = block_reduce(acc);
  if (threadIdx.x != 0) return;
  const float l = total.m + logf(total.s);
  lse[r] = l;
  const int64_t t = targets[r];
  if (t == ignore_index) loss[r] = 0.f;
  else if (t < 0 || t >= V) loss[r] = NAN;
  else loss[r] = l - to_float(row[t]);
}

__device__ __forceinline__ float grad_at(float x, int64_t j, int64_t t, float l, float scale) {
  return (expf(x - l) - (j == t ? 1.f : 0.f)) * scale;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(const T* logits, int64_t in_stride, T* dlogits, int64_t out_stride, int64_t V,
                                  const int64_t* __restrict__ targets, int64_t ignore_index,
                                  const float* __restrict__ lse, const float* __restrict__ grad_loss,
                                  const float* __restrict__ n_valid) {
  // No __restrict__ on logits/dlogits: they may be the same buffer.
  constexpr int N = kVec16<T>;
  const int64_t r = blockIdx.x;
  const T* in = logits + r * in_stride;
  T* out = dlogits + r * out_stride;
  const int64_t t = targets[r];
  const float scale = t == ignore_index ? 0.f : *grad_loss / *n_valid;
  const float l = lse[r];
  // The vector path needs both rows equally misaligned (always so in place or for same-layout buffers).
  int64_t head = head_len(in, V);
  if (head != head_len(out, V)) head = V;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    out[j] = from_float<T>(grad_at(to_float(in[j]), j, t, l, scale));
  const int64_t nvec = (V - head) / N;
  const auto* vin = reinterpret_cast<const Vec<T, N>*>(in + head);
  auto* vout = reinterpret_cast<Vec<T, N>*>(out + head);
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, N> pack = vin[i];
    Vec<T, N> res;
    const int64_t j0 = head + i * N;
#pragma unroll
    for (int k = 0; k < N; ++k) res.v[k] = from_float<T>(grad_at(to_float(pack.v[k]), j0 + k, t, l, scale));
    vout[i] = res;
  }
  for (int64_t j = head + nvec * N + threadIdx.x; j < V; j += blockDim.x)
    out[j] = from_float<T>(grad_at(to_float(in[j]), j, t, l, scale));
}

}  // namespace

LaunchError cross_entropy_forward(DType dt, const void* logits, int64_t rows, int64_t V, int64_t stride,
                                  const int64_t* targets, int64_t ignore_index, float* loss, float* lse,
                                  void* stream) {
  if (rows == 0) return nullptr;
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(logits), V, stride, targets, ignore_index, loss, lse);
    return launch_status();
  });
}

LaunchError cross_entropy_backward(DType dt, const void* logits, int64_t in_stride, void* dlogits,
                                   int64_t out_stride, int64_t rows, int64_t V, const int64_t* targets,
                                   int64_t ignore_index, const float* lse, const float* grad_loss,
                                   const float* n_valid, void* stream) {
  if (rows == 0) return nullptr;
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(logits), in_stride, static_cast<T*>(dlogits), out_stride, V, targets,
        ignore_index, lse, grad_loss, n_valid);
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
