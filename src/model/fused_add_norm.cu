// Fused residual add + LayerNorm / RMSNorm. Forward: one block per row reads x and r once, writes h = x + r
// and, from h's stored values, the row's statistics and y; eager PyTorch runs the add and the norm as two
// kernels, reading h back from memory. Backward: one block per row yields ∂h = ∂h_out + the norm's input
// gradient in one pass (eager adds the two in a third kernel), then a second kernel sums ∂y·ĥ and ∂y over
// chunks of rows per column (32 columns per block, coalesced), and the caller adds up the chunks.
// A thread re-reads only what it wrote itself (h in the forward), so no synchronisation is needed for it;
// block_sum synchronises the block around each reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cuda_vec.cuh"
#include "fused_add_norm_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kChunkRows = 256;  // rows per weight-gradient partial

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over the block (kThreads threads), returned to every thread.
__device__ float block_sum(float v) {
  __shared__ float part[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = lane < kWarps ? part[lane] : 0.f;
  t = warp_sum(t);  // every warp reduces the partials itself: no second round through shared memory
  __syncthreads();  // all reads of part done before a later call overwrites it
  return t;
}

// kAdd: h = x + r is written and normalised; else x itself is (r and h unused, H = X).
template <typename X, typename R, typename H, typename Y, bool kAdd>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const X* __restrict__ x, const R* __restrict__ r, H* __restrict__ h, Y* __restrict__ y,
                   const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ mean_out,
                   float* __restrict__ rstd_out, int64_t dim, float eps, bool rms) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * dim;
  x += off, y += off;
  const H* src;  // the norm's input row
  float s = 0.f;
  if constexpr (kAdd) {
    r += off, h += off;
    for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
      const H v = from_float<H>(to_float(x[i]) + to_float(r[i]));  // rounded as the eager add rounds it
      h[i] = v;
      s += to_float(v);
    }
    src = h;
  } else {
    static_assert(std::is_same_v<H, X>, "without the add the norm reads x");
    for (int64_t i = threadIdx.x; i < dim; i += kThreads) s += to_float(x[i]);
    src = x;
  }
  const float mean = rms ? 0.f : block_sum(s) / static_cast<float>(dim);
  float q = 0.f;  // second pass over the row (cached): the centred variance, not E[h²] − mean²
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float c = to_float(src[i]) - mean;
    q += c * c;
  }
  const float rstd = rsqrtf(block_sum(q) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float n = (to_float(src[i]) - mean) * rstd * gamma[i];
    y[i] = from_float<Y>(beta ? n + beta[i] : n);
  }
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// ∂ĥ = ∂y·γ; LayerNorm: ∂h = rstd·(∂ĥ − mean(∂ĥ) − ĥ·mean(∂ĥ·ĥ)); RMSNorm: ∂h = rstd·(∂ĥ − ĥ·mean(∂ĥ·ĥ)).
template <typename H, typename Y>
__global__ void __launch_bounds__(kThreads)
    backward_rows_kernel(const Y* __restrict__ dy, const H* __restrict__ dh_out, const H* __restrict__ h,
                         const float* __restrict__ gamma, const float* __restrict__ mean_in,
                         const float* __restrict__ rstd_in, H* __restrict__ dh, int64_t dim, bool rms) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * dim;
  dy += off, h += off, dh += off;
  if (dh_out) dh_out += off;
  const float mean = rms ? 0.f : mean_in[blockIdx.x], rstd = rstd_in[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float g = to_float(dy[i]) * gamma[i];
    sg += g;
    sgx += g * (to_float(h[i]) - mean) * rstd;
  }
  const float inv_dim = 1.f / static_cast<float>(dim);
  const float mg = rms ? 0.f : block_sum(sg) * inv_dim;
  const float mgx = block_sum(sgx) * inv_dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float g = to_float(dy[i]) * gamma[i];
    const float xhat = (to_float(h[i]) - mean) * rstd;
    const float d = rstd * (g - mg - xhat * mgx);
    dh[i] = from_float<H>(dh_out ? d + to_float(dh_out[i]) : d);
  }
}

// Block (32, kWarps): threadIdx.x picks the column, threadIdx.y strides over the chunk's rows; the block's
// kWarps partial sums per column are added in shared memory and written to row blockIdx.y of the partials.
template <typename H, typename Y>
__global__ void __launch_bounds__(kThreads)
    backward_weight_kernel(const Y* __restrict__ dy, const H* __restrict__ h, const float* __restrict__ mean_in,
                           const float* __restrict__ rstd_in, float* __restrict__ dgamma_part,
                           float* __restrict__ dbeta_part, int64_t rows, int64_t dim, bool rms) {
  __shared__ float sg[kWarps][32], sb[kWarps][32];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kChunkRows;
  const int64_t last = first + kChunkRows < rows ? first + kChunkRows : rows;
  float g = 0.f, b = 0.f;
  if (col < dim) {
    for (int64_t row = first + threadIdx.y; row < last; row += kWarps) {
      const float d = to_float(dy[row * dim + col]);
      const float mean = rms ? 0.f : mean_in[row];
      g += d * (to_float(h[row * dim + col]) - mean) * rstd_in[row];
      b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < dim) {
    for (int k = 1; k < kWarps; ++k) g += sg[k][threadIdx.x], b += sb[k][threadIdx.x];
    dgamma_part[blockIdx.y * dim + col] = g;
    if (dbeta_part) dbeta_part[blockIdx.y * dim + col] = b;
  }
}

LaunchError launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

int64_t add_norm_weight_chunks(int64_t rows) { return std::max<int64_t>(1, (rows + kChunkRows - 1) / kChunkRows); }

LaunchError add_norm_forward(const AddNormForward& a, void* stream) {
  if (a.rows == 0 || a.dim == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  if (!a.r) {  // the norm alone
    return dispatch(a.x_type, [&](auto xt) {
      return dispatch(a.y_type, [&](auto yt) {
        using X = decltype(xt);
        using Y = decltype(yt);
        forward_kernel<X, X, X, Y, false><<<static_cast<unsigned>(a.rows), kThreads, 0, st>>>(
            static_cast<const X*>(a.x), nullptr, nullptr, static_cast<Y*>(a.y), a.gamma, a.beta, a.mean, a.rstd,
            a.dim, a.eps, a.rms);
        return launched();
      });
    });
  }
  return dispatch(a.x_type, [&](auto xt) {
    return dispatch(a.r_type, [&](auto rt) {
      return dispatch(a.y_type, [&](auto yt) {
        using X = decltype(xt);
        using R = decltype(rt);
        using Y = decltype(yt);
        // fp32 if either addend is: the sum type of fused_add_norm_cuda.h's sum_dtype.
        using H = std::conditional_t<std::is_same_v<X, float> || std::is_same_v<R, float>, float, __nv_bfloat16>;
        forward_kernel<X, R, H, Y, true><<<static_cast<unsigned>(a.rows), kThreads, 0, st>>>(
            static_cast<const X*>(a.x), static_cast<const R*>(a.r), static_cast<H*>(a.h), static_cast<Y*>(a.y),
            a.gamma, a.beta, a.mean, a.rstd, a.dim, a.eps, a.rms);
        return launched();
      });
    });
  });
}

LaunchError add_norm_backward(const AddNormBackward& a, void* stream) {
  if (a.rows == 0 || a.dim == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch(a.h_type, [&](auto ht) {
    return dispatch(a.y_type, [&](auto yt) {
      using H = decltype(ht);
      using Y = decltype(yt);
      const auto* dy = static_cast<const Y*>(a.dy);
      const auto* h = static_cast<const H*>(a.h);
      backward_rows_kernel<H, Y><<<static_cast<unsigned>(a.rows), kThreads, 0, st>>>(
          dy, static_cast<const H*>(a.dh_out), h, a.gamma, a.mean, a.rstd, static_cast<H*>(a.dh), a.dim, a.rms);
      if (LaunchError e = launched()) return e;
      const dim3 grid(static_cast<unsigned>((a.dim + 31) / 32), static_cast<unsigned>(a.chunks));
      backward_weight_kernel<H, Y><<<grid, dim3(32, kWarps), 0, st>>>(dy, h, a.mean, a.rstd, a.dgamma_part,
                                                                       a.dbeta_part, a.rows, a.dim, a.rms);
      return launched();
    });
  });
}

}  // namespace meshtrain::model::cuda
