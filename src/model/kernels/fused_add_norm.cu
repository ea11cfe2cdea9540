// Fused residual add + LayerNorm / RMSNorm. Forward: one block per row reads x and r once, writes h = x + r
// and, from h's values, the row's statistics and y; eager PyTorch runs the add and the norm as two kernels,
// reading h back from memory. Backward: ∂h = ∂h_out + the norm's input gradient in one pass (eager adds the
// two in a third kernel), and the weight gradients' partial sums (∂y·ĥ and ∂y per column over a chunk of
// rows), which the caller adds up over the chunks.
//
// Two forms of each. The row-resident kernels (rows of a multiple of 8 elements, at most 8,192, aligned
// pointers: every model's hidden size) give each thread 8 consecutive elements of the row, loaded once in
// 16-byte accesses and kept in registers through both reductions; the backward block walks a chunk of
// kRowChunk rows and keeps its threads' 8 columns of the weight-gradient partials in registers, so ∂y and h
// are read once for everything. The strided kernels take any size and alignment: 256 threads stride over the
// row and re-read it from cache, and a second kernel re-reads ∂y and h for the weight partials (the first
// form of these kernels; on an H200 at GPT-2's shape the row-resident forward and backward take well under
// half their time, docs/PERFORMANCE.md).
// A thread re-reads only what it wrote itself (h in the strided forward), so no synchronisation is needed for
// it; block_sum / block_sum2 synchronise the block around each reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_add_norm_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;  // the strided kernels
constexpr int kWarps = kThreads / 32;
constexpr int64_t kChunkRows = 256;  // rows per weight-gradient partial, strided kernels
constexpr int kPack = 8;             // elements per thread, row-resident kernels
constexpr int kMaxRowThreads = 1024;
constexpr int64_t kRowChunk = 16;    // rows per weight-gradient partial, row-resident backward

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

// γ or β as the model holds it, fp32 or bf16: the type is one flag for the whole launch (every thread takes the
// same branch), where a template parameter would double each kernel's instantiations. Null p: absent (β of
// RMSNorm).
struct Weight {
  const void* p;
  bool bf16;

  __device__ __forceinline__ float at(int64_t i) const {
    return bf16 ? to_float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
};

// kAdd: h = x + r is written and normalised; else x itself is (r and h unused, H = X).
template <typename X, typename R, typename H, typename Y, bool kAdd>
__global__ void __launch_bounds__(kThreads)
    add_norm_forward_kernel(const X* __restrict__ x, const R* __restrict__ r, H* __restrict__ h, Y* __restrict__ y,
                            Weight gamma, Weight beta, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                            int64_t dim, float eps, bool rms) {
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
    const float n = (to_float(src[i]) - mean) * rstd * gamma.at(i);
    y[i] = from_float<Y>(beta.p ? n + beta.at(i) : n);
  }
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// ∂ĥ = ∂y·γ; LayerNorm: ∂h = rstd·(∂ĥ − mean(∂ĥ) − ĥ·mean(∂ĥ·ĥ)); RMSNorm: ∂h = rstd·(∂ĥ − ĥ·mean(∂ĥ·ĥ)).
template <typename H, typename Y>
__global__ void __launch_bounds__(kThreads)
    add_norm_backward_rows_kernel(const Y* __restrict__ dy, const H* __restrict__ dh_out, const H* __restrict__ h,
                                  Weight gamma, const float* __restrict__ mean_in,
                                  const float* __restrict__ rstd_in, H* __restrict__ dh, int64_t dim, bool rms) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * dim;
  dy += off, h += off, dh += off;
  if (dh_out) dh_out += off;
  const float mean = rms ? 0.f : mean_in[blockIdx.x], rstd = rstd_in[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float g = to_float(dy[i]) * gamma.at(i);
    sg += g;
    sgx += g * (to_float(h[i]) - mean) * rstd;
  }
  const float inv_dim = 1.f / static_cast<float>(dim);
  const float mg = rms ? 0.f : block_sum(sg) * inv_dim;
  const float mgx = block_sum(sgx) * inv_dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float g = to_float(dy[i]) * gamma.at(i);
    const float xhat = (to_float(h[i]) - mean) * rstd;
    const float d = rstd * (g - mg - xhat * mgx);
    dh[i] = from_float<H>(dh_out ? d + to_float(dh_out[i]) : d);
  }
}

// Block (32, kWarps): threadIdx.x picks the column, threadIdx.y strides over the chunk's rows; the block's
// kWarps partial sums per column are added in shared memory and written to row blockIdx.y of the partials.
template <typename H, typename Y>
__global__ void __launch_bounds__(kThreads)
    add_norm_backward_weight_kernel(const Y* __restrict__ dy, const H* __restrict__ h,
                                    const float* __restrict__ mean_in, const float* __restrict__ rstd_in,
                                    float* __restrict__ dgamma_part, float* __restrict__ dbeta_part, int64_t rows,
                                    int64_t dim, bool rms) {
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

// The sums of a and b over the block (any multiple of 32 threads up to 1024), returned to every thread.
__device__ float2 block_sum2(float a, float b) {
  __shared__ float2 part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  a = warp_sum(a), b = warp_sum(b);
  if (lane == 0) part[warp] = make_float2(a, b);
  __syncthreads();
  float2 t = lane < warps ? part[lane] : make_float2(0.f, 0.f);
  t.x = warp_sum(t.x), t.y = warp_sum(t.y);
  __syncthreads();  // all reads of part done before a later call overwrites it
  return t;
}

template <typename T>
__device__ __forceinline__ void load_pack(const T* p, float (&v)[kPack]) {
  const auto q = *reinterpret_cast<const Vec<T, kPack>*>(p);
#pragma unroll
  for (int i = 0; i < kPack; ++i) v[i] = to_float(q.v[i]);
}

// Elements [col, col + 8) of w.
__device__ __forceinline__ void load_pack(const Weight& w, int64_t col, float (&v)[kPack]) {
  if (w.bf16) load_pack(static_cast<const __nv_bfloat16*>(w.p) + col, v);
  else load_pack(static_cast<const float*>(w.p) + col, v);
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, const float (&v)[kPack]) {
  Vec<T, kPack> q;
#pragma unroll
  for (int i = 0; i < kPack; ++i) q.v[i] = from_float<T>(v[i]);
  *reinterpret_cast<Vec<T, kPack>*>(p) = q;
}

// add_norm_forward_kernel's arithmetic with the row in registers: thread t holds elements [8t, 8t + 8).
template <typename X, typename R, typename H, typename Y, bool kAdd>
__global__ void __launch_bounds__(kMaxRowThreads)
    add_norm_forward_row_kernel(const X* __restrict__ x, const R* __restrict__ r, H* __restrict__ h, Y* __restrict__ y,
                                Weight gamma, Weight beta, float* __restrict__ mean_out,
                                float* __restrict__ rstd_out, int64_t dim, float eps, bool rms) {
  const int64_t col = static_cast<int64_t>(threadIdx.x) * kPack, off = blockIdx.x * dim + col;
  const bool mine = col < dim;
  float v[kPack] = {}, s = 0.f;
  if (mine) {
    load_pack(x + off, v);
    if constexpr (kAdd) {
      float w[kPack];
      load_pack(r + off, w);
#pragma unroll
      for (int i = 0; i < kPack; ++i) v[i] = to_float(from_float<H>(v[i] + w[i]));  // rounded as stored
      store_pack(h + off, v);
    }
#pragma unroll
    for (int i = 0; i < kPack; ++i) s += v[i];
  }
  const float mean = rms ? 0.f : block_sum2(s, 0.f).x / static_cast<float>(dim);
  float q = 0.f;  // the centred variance, not E[h²] − mean²
#pragma unroll
  for (int i = 0; i < kPack; ++i) q += mine ? (v[i] - mean) * (v[i] - mean) : 0.f;
  const float rstd = rsqrtf(block_sum2(q, 0.f).x / static_cast<float>(dim) + eps);
  if (mine) {
    float g[kPack], b[kPack] = {};
    load_pack(gamma, col, g);
    if (beta.p) load_pack(beta, col, b);
#pragma unroll
    for (int i = 0; i < kPack; ++i) v[i] = (v[i] - mean) * rstd * g[i] + b[i];
    store_pack(y + off, v);
  }
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// add_norm_backward_rows_kernel and add_norm_backward_weight_kernel in one: block b walks rows
// [b·kRowChunk, +kRowChunk) and writes row b of the partials; thread t owns columns [8t, 8t + 8) throughout.
template <typename H, typename Y>
__global__ void __launch_bounds__(kMaxRowThreads)
    add_norm_backward_row_kernel(const Y* __restrict__ dy, const H* __restrict__ dh_out, const H* __restrict__ h,
                                 Weight gamma, const float* __restrict__ mean_in,
                                 const float* __restrict__ rstd_in, H* __restrict__ dh, float* __restrict__ dgamma_part,
                                 float* __restrict__ dbeta_part, int64_t rows, int64_t dim, bool rms) {
  const int64_t col = static_cast<int64_t>(threadIdx.x) * kPack;
  const bool mine = col < dim;
  const float inv_dim = 1.f / static_cast<float>(dim);
  float gam[kPack] = {}, pg[kPack] = {}, pb[kPack] = {};
  if (mine) load_pack(gamma, col, gam);
  const int64_t first = blockIdx.x * kRowChunk, last = first + kRowChunk < rows ? first + kRowChunk : rows;
  for (int64_t row = first; row < last; ++row) {
    const int64_t off = row * dim + col;
    const float mean = rms ? 0.f : mean_in[row], rstd = rstd_in[row];
    float g[kPack] = {}, xhat[kPack] = {}, sg = 0.f, sgx = 0.f;
    if (mine) {
      load_pack(dy + off, g);
      load_pack(h + off, xhat);
#pragma unroll
      for (int i = 0; i < kPack; ++i) {
        xhat[i] = (xhat[i] - mean) * rstd;
        pg[i] += g[i] * xhat[i];
        pb[i] += g[i];
        g[i] *= gam[i];  // ∂ĥ
        sg += g[i];
        sgx += g[i] * xhat[i];
      }
    }
    const float2 t = block_sum2(sg, sgx);
    const float mg = rms ? 0.f : t.x * inv_dim, mgx = t.y * inv_dim;
    if (mine) {
      float d[kPack] = {};
      if (dh_out) load_pack(dh_out + off, d);
#pragma unroll
      for (int i = 0; i < kPack; ++i) d[i] += rstd * (g[i] - mg - xhat[i] * mgx);
      store_pack(dh + off, d);
    }
  }
  if (mine) {
    store_pack(dgamma_part + blockIdx.x * dim + col, pg);
    if (dbeta_part) store_pack(dbeta_part + blockIdx.x * dim + col, pb);
  }
}

// Whether rows of `dim` fit the row-resident kernels: whole 8-element packs, one thread each.
bool fits_row_threads(int64_t dim) { return dim > 0 && dim % kPack == 0 && dim / kPack <= kMaxRowThreads; }

// Whether p (null: absent) is aligned for a pack of 8 elements of type t.
bool pack_aligned(const void* p, DType t) { return !p || aligned(p, kPack * (t == DType::kBF16 ? 2 : 4)); }

unsigned row_threads(int64_t dim) { return static_cast<unsigned>((dim / kPack + 31) / 32 * 32); }

bool forward_row_resident(const AddNormForward& a) {
  const DType ht = a.r ? sum_dtype(a.x_type, a.r_type) : a.x_type;
  return fits_row_threads(a.dim) && pack_aligned(a.x, a.x_type) && pack_aligned(a.r, a.r_type) &&
         pack_aligned(a.h, ht) && pack_aligned(a.y, a.y_type) && pack_aligned(a.gamma, a.w_type) &&
         pack_aligned(a.beta, a.w_type);
}

// The partials are fresh allocations (aligned), so they do not enter the choice: the caller sizes them from
// add_norm_weight_chunks before it has them.
bool backward_row_resident(const AddNormBackward& a) {
  return fits_row_threads(a.dim) && pack_aligned(a.dy, a.y_type) && pack_aligned(a.dh_out, a.h_type) &&
         pack_aligned(a.h, a.h_type) && pack_aligned(a.dh, a.h_type) && pack_aligned(a.gamma, a.w_type);
}

}  // namespace

int64_t add_norm_weight_chunks(const AddNormBackward& a) {
  const int64_t per_chunk = backward_row_resident(a) ? kRowChunk : kChunkRows;
  return std::max<int64_t>(1, (a.rows + per_chunk - 1) / per_chunk);
}

LaunchError add_norm_forward(const AddNormForward& a, void* stream) {
  if (a.rows == 0 || a.dim == 0) return nullptr;
  if (a.w_type == DType::kF16) return "add_norm_forward: γ and β are fp32 or bf16";
  const Weight gamma{a.gamma, a.w_type == DType::kBF16}, beta{a.beta, a.w_type == DType::kBF16};
  const auto st = static_cast<cudaStream_t>(stream);
  const bool resident = forward_row_resident(a);
  const unsigned blocks = static_cast<unsigned>(a.rows), threads = resident ? row_threads(a.dim) : kThreads;
  if (!a.r) {  // the norm alone
    return dispatch(a.x_type, [&](auto xt) {
      return dispatch(a.y_type, [&](auto yt) {
        using X = decltype(xt);
        using Y = decltype(yt);
        auto* kernel = resident ? add_norm_forward_row_kernel<X, X, X, Y, false>
                                : add_norm_forward_kernel<X, X, X, Y, false>;
        kernel<<<blocks, threads, 0, st>>>(static_cast<const X*>(a.x), nullptr, nullptr, static_cast<Y*>(a.y),
                                           gamma, beta, a.mean, a.rstd, a.dim, a.eps, a.rms);
        return launch_status();
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
        auto* kernel = resident ? add_norm_forward_row_kernel<X, R, H, Y, true>
                                : add_norm_forward_kernel<X, R, H, Y, true>;
        kernel<<<blocks, threads, 0, st>>>(static_cast<const X*>(a.x), static_cast<const R*>(a.r),
                                           static_cast<H*>(a.h), static_cast<Y*>(a.y), gamma, beta, a.mean,
                                           a.rstd, a.dim, a.eps, a.rms);
        return launch_status();
      });
    });
  });
}

LaunchError add_norm_backward(const AddNormBackward& a, void* stream) {
  if (a.rows == 0 || a.dim == 0) return nullptr;
  if (a.chunks != add_norm_weight_chunks(a)) return "add_norm_backward: partials not sized by add_norm_weight_chunks";
  if (a.w_type == DType::kF16) return "add_norm_backward: γ is fp32 or bf16";
  const Weight gamma{a.gamma, a.w_type == DType::kBF16};
  const auto st = static_cast<cudaStream_t>(stream);
  const bool resident = backward_row_resident(a);
  return dispatch(a.h_type, [&](auto ht) {
    return dispatch(a.y_type, [&](auto yt) {
      using H = decltype(ht);
      using Y = decltype(yt);
      const auto* dy = static_cast<const Y*>(a.dy);
      const auto* h = static_cast<const H*>(a.h);
      const auto* dh_out = static_cast<const H*>(a.dh_out);
      auto* dh = static_cast<H*>(a.dh);
      if (resident) {
        add_norm_backward_row_kernel<H, Y><<<static_cast<unsigned>(a.chunks), row_threads(a.dim), 0, st>>>(
            dy, dh_out, h, gamma, a.mean, a.rstd, dh, a.dgamma_part, a.dbeta_part, a.rows, a.dim, a.rms);
        return launch_status();
      }
      add_norm_backward_rows_kernel<H, Y><<<static_cast<unsigned>(a.rows), kThreads, 0, st>>>(
          dy, dh_out, h, gamma, a.mean, a.rstd, dh, a.dim, a.rms);
      if (LaunchError e = launch_status()) return e;
      const dim3 grid(static_cast<unsigned>((a.dim + 31) / 32), static_cast<unsigned>(a.chunks));
      add_norm_backward_weight_kernel<H, Y><<<grid, dim3(32, kWarps), 0, st>>>(dy, h, a.mean, a.rstd, a.dgamma_part,
                                                                       a.dbeta_part, a.rows, a.dim, a.rms);
      return launch_status();
    });
  });
}

}  // namespace meshtrain::model::cuda
