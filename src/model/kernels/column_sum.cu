// The column sum of a [rows, cols] matrix (a bias gradient: Σ over the rows of ∂y), in two deterministic
// stages (column_sum_cuda.h). Stage 1, block (32, kRowLanes): threadIdx.x picks a vector of V adjacent
// columns, so a warp reads 32·V contiguous elements of one row (coalesced; 16-byte loads where aligned);
// threadIdx.y strides over the chunk's rows; the lanes' fp32 sums meet in shared memory and the block writes
// its chunk's partial row. Stage 2, block (32, kRowLanes): the same shape over the [chunks, cols] partials.
// (ATen's generic reduction, which at::sum(0) runs, took 45 µs for GPT-2's [32768, 768] bf16 ∂y on an H200,
// about three times what one pass over its 48 MiB costs there.)
#include <cuda_runtime.h>

#include "model/kernels/column_sum_cuda.h"
#include "model/kernels/cuda_vec.cuh"

namespace meshtrain::model::cuda {
namespace {

constexpr int kRowLanes = 8;
constexpr int kThreads = 32 * kRowLanes;
constexpr int64_t kChunkRows = 256;  // rows per partial: 32 loads per thread, enough blocks to fill the GPU
constexpr int64_t kMaxChunks = 65535;  // gridDim.y's limit

// Rows per chunk: kChunkRows, more where the chunk count would pass gridDim.y's limit.
int64_t chunk_rows(int64_t rows) {
  const int64_t need = (rows + kMaxChunks - 1) / kMaxChunks;
  return need > kChunkRows ? need : kChunkRows;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    column_sum_partials_kernel(const T* __restrict__ x, float* __restrict__ part, int64_t rows, int64_t cols,
                               int64_t per_chunk) {
  // sums[lane][k][tx]: column tx·V + k of the block's 32·V, as lane threadIdx.y summed it.
  __shared__ float sums[kRowLanes][V][32];
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * per_chunk;
  const int64_t last = first + per_chunk < rows ? first + per_chunk : rows;
  float s[V];
#pragma unroll
  for (int k = 0; k < V; ++k) s[k] = 0.f;
  if (col < cols) {  // with V > 1, cols % V == 0: the whole vector is inside the row
#pragma unroll 4
    for (int64_t row = first + threadIdx.y; row < last; row += kRowLanes) {
      const auto v = *reinterpret_cast<const Vec<T, V>*>(x + row * cols + col);
#pragma unroll
      for (int k = 0; k < V; ++k) s[k] += to_float(v.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) sums[threadIdx.y][k][threadIdx.x] = s[k];
  __syncthreads();
  // The block's 32·V columns over its 256 threads, consecutive threads on consecutive columns.
  const int64_t block_col = static_cast<int64_t>(blockIdx.x) * 32 * V;
  for (int j = threadIdx.y * 32 + threadIdx.x; j < 32 * V; j += kThreads) {
    if (block_col + j >= cols) break;
    float t = 0.f;
#pragma unroll
    for (int lane = 0; lane < kRowLanes; ++lane) t += sums[lane][j % V][j / V];
    part[static_cast<int64_t>(blockIdx.y) * cols + block_col + j] = t;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    column_sum_finish_kernel(const float* __restrict__ part, int64_t chunks, int64_t cols, T* __restrict__ out) {
  __shared__ float sums[kRowLanes][32];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (col < cols)
    for (int64_t c = threadIdx.y; c < chunks; c += kRowLanes) s += part[c * cols + col];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int lane = 1; lane < kRowLanes; ++lane) s += sums[lane][threadIdx.x];
    out[col] = from_float<T>(s);
  }
}

template <typename T, int V>
void launch_partials(const T* x, float* part, int64_t rows, int64_t cols, cudaStream_t st) {
  const int64_t vcols = (cols + V - 1) / V;
  const dim3 grid(static_cast<unsigned>((vcols + 31) / 32), static_cast<unsigned>(column_sum_chunks(rows)));
  column_sum_partials_kernel<T, V><<<grid, dim3(32, kRowLanes), 0, st>>>(x, part, rows, cols, chunk_rows(rows));
}

}  // namespace

int64_t column_sum_chunks(int64_t rows) {
  if (rows <= 0) return 1;
  const int64_t per = chunk_rows(rows);
  return (rows + per - 1) / per;
}

LaunchError column_sum_partials(DType x_type, const void* x, int64_t rows, int64_t cols, float* part, void* stream) {
  if (cols == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  if (rows == 0) {  // one chunk of no rows: zeros
    return cuda_error(cudaMemsetAsync(part, 0, sizeof(float) * cols, st));
  }
  return dispatch_with_half(x_type, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const auto* xt = static_cast<const T*>(x);
    if (cols % V == 0 && aligned(x, 16)) launch_partials<T, V>(xt, part, rows, cols, st);
    else launch_partials<T, 1>(xt, part, rows, cols, st);
    return launch_status();
  });
}

LaunchError column_sum_finish(const float* part, int64_t chunks, int64_t cols, DType out_type, void* out,
                              void* stream) {
  if (cols == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch_with_half(out_type, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32));
    column_sum_finish_kernel<T><<<grid, dim3(32, kRowLanes), 0, st>>>(part, chunks, cols, static_cast<T*>(out));
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
