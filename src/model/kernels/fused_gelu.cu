// The backward of y = gelu_tanh(pre) where pre = x·Wᵀ + b: one kernel writes ∂pre and, in the same pass,
// the column sums that make the bias gradient; eager PyTorch reads ∂pre a second time for them (the
// addmm's bias backward). Block (32, kRowLanes): threadIdx.x picks the column (coalesced across a warp),
// threadIdx.y strides over the chunk's rows; the lanes' sums meet in shared memory.
#include <cuda_runtime.h>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_gelu_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kRowLanes = 8;
constexpr int64_t kChunkRows = 256;  // rows per bias-gradient partial

// d/dp of 0.5·p·(1 + tanh(√(2/π)·(p + 0.044715·p³))), GPT-2's GELU (PyTorch's approximate="tanh").
__device__ __forceinline__ float gelu_tanh_grad(float p) {
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float t = tanhf(k0 * (p + k1 * p * p * p));
  return 0.5f * (1.f + t) + 0.5f * p * (1.f - t * t) * k0 * (1.f + 3.f * k1 * p * p);
}

template <typename T>
__global__ void __launch_bounds__(32 * kRowLanes)
    gelu_bias_backward_kernel(const T* __restrict__ dy, const T* __restrict__ pre, T* __restrict__ dpre,
                              float* __restrict__ dbias_part, int64_t rows, int64_t cols) {
  __shared__ float part[kRowLanes][32];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kChunkRows;
  const int64_t last = first + kChunkRows < rows ? first + kChunkRows : rows;
  float s = 0.f;
  if (col < cols) {
    for (int64_t row = first + threadIdx.y; row < last; row += kRowLanes) {
      const int64_t i = row * cols + col;
      const float d = to_float(dy[i]) * gelu_tanh_grad(to_float(pre[i]));
      dpre[i] = from_float<T>(d);
      s += d;
    }
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int k = 1; k < kRowLanes; ++k) s += part[k][threadIdx.x];
    dbias_part[blockIdx.y * cols + col] = s;
  }
}

}  // namespace

int64_t gelu_bias_chunks(int64_t rows) { return rows > 0 ? (rows + kChunkRows - 1) / kChunkRows : 1; }

LaunchError gelu_bias_backward(DType dt, const void* dy, const void* pre, void* dpre, float* dbias_part,
                               int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(gelu_bias_chunks(rows)));
    gelu_bias_backward_kernel<T><<<grid, dim3(32, kRowLanes), 0, st>>>(
        static_cast<const T*>(dy), static_cast<const T*>(pre), static_cast<T*>(dpre), dbias_part, rows, cols);
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
