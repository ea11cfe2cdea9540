// NF4 dequantization (nf4_dequantize_cuda.h): one thread per code byte, i.e. two adjacent values; the 16 NF4
// levels in constant memory, the 256-entry absmax map in shared memory. A block of 256 threads covers 512
// values = 8 NF4 blocks, so its absmax lookups hit 8 shared entries. Products with __fmul_rn / __fadd_rn so
// that nvcc contracts nothing into an FMA: the ATen path on the CPU rounds each product, and the GPU must
// give its bits.
#include <cuda_runtime.h>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/nf4_dequantize_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 256;

// Nf4Tensor::levels() (include/meshtrain/model/nf4_tensor.h), the same hex literals.
__constant__ float kLevels[16] = {
    -0x1p+0f,        -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f, -0x1.23449ap-2f, -0x1.7a6a7ep-3f,
    -0x1.74f0e2p-4f, 0.0f,            0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f,  0x1.5a0674p-2f,
    0x1.c3497p-2f,   0x1.200f56p-1f,  0x1.722766p-1f, 0x1p+0f};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    nf4_dequantize_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ absmax_codes,
                          const float* __restrict__ scales, const float* __restrict__ map, float offset, int64_t n,
                          T* __restrict__ out) {
  __shared__ float smap[256];
  smap[threadIdx.x] = map[threadIdx.x];
  __syncthreads();
  const int64_t byte = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t first = 2 * byte;
  if (first >= n) return;
  const uint8_t c = codes[byte];
  // Both values share one 64-block (first is even).
  const int64_t b = first / 64;
  const float absmax = __fadd_rn(__fmul_rn(smap[absmax_codes[b]], scales[b / 256]), offset);
  out[first] = from_float<T>(__fmul_rn(kLevels[c >> 4], absmax));
  if (first + 1 < n) out[first + 1] = from_float<T>(__fmul_rn(kLevels[c & 15], absmax));
}

}  // namespace

LaunchError nf4_dequantize(const uint8_t* codes, const uint8_t* absmax_codes, const float* scales, const float* map,
                           float offset, int64_t n, DType out_type, void* out, void* stream) {
  if (n == 0) return nullptr;
  const auto st = static_cast<cudaStream_t>(stream);
  const int64_t bytes = (n + 1) / 2;
  const dim3 grid(static_cast<unsigned>((bytes + kThreads - 1) / kThreads));
  return dispatch_with_half(out_type, [&](auto tag) {
    using T = decltype(tag);
    nf4_dequantize_kernel<T><<<grid, kThreads, 0, st>>>(codes, absmax_codes, scales, map, offset, n,
                                                         static_cast<T*>(out));
    return launch_status();
  });
}

}  // namespace meshtrain::model::cuda
