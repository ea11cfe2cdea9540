// AdamW's update in one pass over each parameter: p, g, m and v read, p, m and v written, 16 bytes an access. ATen's
// fused AdamW computes the same (its FusedAdamMathFunctor in ADAMW mode: the operations below, in its order), but
// through multi-tensor launches of at most a few hundred blocks each and, when it divides the gradients by a clip
// divisor, it writes them back: 4 more bytes a parameter that nothing reads after the update. One launch here
// covers one parameter with a thread per 16 bytes of it: on an H100 that moves 3.02–3.05 TB/s, a device copy's
// rate, where a grid of 8 blocks an SM striding over the parameter with two accesses in flight per buffer moved
// 2.78–2.87 (docs/PERFORMANCE.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/fused_adamw_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;

struct Corrections {
  float bias1, bias2_sqrt;
};

__device__ __forceinline__ Corrections corrections(const AdamWConstants& c, const float* step) {
  // pow on floats, as ATen's pow_ computes the corrections in the fp32 opmath of fp32 parameters.
  const float s = *step;
  return {1.f - powf(c.beta1, s), sqrtf(1.f - powf(c.beta2, s))};
}

// One element, as ATen's adam_math<float, float, 4, ADAMW, amsgrad = false> with maximize off.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWConstants& c,
                                              const Corrections& k) {
  if (c.grad_divisor) g /= *c.grad_divisor;
  if (c.weight_decay != 0) p -= c.lr * c.weight_decay * p;
  m = fmaf(c.beta1, m, fmaf(-c.beta1, g, g));
  v = fmaf(c.beta2, v, fmaf(-c.beta2, g * g, g * g));
  const float step_size = c.lr / k.bias1;
  const float denom = (sqrtf(v) / k.bias2_sqrt) + c.eps;
  p -= step_size * m / denom;
}

// n4 float4s of each buffer (16-byte aligned), one a thread, then the last n % 4 elements by the first threads of
// block 0.
__global__ void __launch_bounds__(kThreads)
    adamw_vec_kernel(float4* __restrict__ p, const float4* __restrict__ g, float4* __restrict__ m,
                     float4* __restrict__ v, const float* step, int64_t n, AdamWConstants c) {
  if (c.skip && *c.skip == 1.f) return;
  const Corrections k = corrections(c, step);
  const int64_t n4 = n / 4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float4 rp = p[i], rm = m[i], rv = v[i];
    const float4 rg = g[i];
    adamw_element(rp.x, rg.x, rm.x, rv.x, c, k);
    adamw_element(rp.y, rg.y, rm.y, rv.y, c, k);
    adamw_element(rp.z, rg.z, rm.z, rv.z, c, k);
    adamw_element(rp.w, rg.w, rm.w, rv.w, c, k);
    p[i] = rp;
    m[i] = rm;
    v[i] = rv;
  }
  if (blockIdx.x == 0 && threadIdx.x < n % 4) {
    const int64_t i = n4 * 4 + threadIdx.x;
    float* ps = reinterpret_cast<float*>(p);
    float* ms = reinterpret_cast<float*>(m);
    float* vs = reinterpret_cast<float*>(v);
    adamw_element(ps[i], reinterpret_cast<const float*>(g)[i], ms[i], vs[i], c, k);
  }
}

// Any alignment: one element at a time.
__global__ void __launch_bounds__(kThreads)
    adamw_scalar_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                        float* __restrict__ v, const float* step, int64_t n, AdamWConstants c) {
  if (c.skip && *c.skip == 1.f) return;
  const Corrections k = corrections(c, step);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    adamw_element(p[i], g[i], m[i], v[i], c, k);
}

// Blocks for `items` per-thread work items: one thread each (the kernels stride over the rest only past a grid's
// largest width).
int blocks_for(int64_t items) {
  return static_cast<int>(
      std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, std::numeric_limits<int>::max()));
}

}  // namespace

LaunchError adamw_update(float* p, const float* g, float* m, float* v, const float* step, int64_t n,
                         const AdamWConstants& c, void* stream) {
  if (n == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  if (aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16)) {
    adamw_vec_kernel<<<blocks_for(n / 4), kThreads, 0, st>>>(
        reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(m),
        reinterpret_cast<float4*>(v), step, n, c);
  } else {
    adamw_scalar_kernel<<<blocks_for(n), kThreads, 0, st>>>(p, g, m, v, step, n, c);
  }
  return launch_status();
}

}  // namespace meshtrain::model::cuda
