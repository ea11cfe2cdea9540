// The rotary embedding of one piece of a head row, shared by the kernels that rotate (fused_rope.cu, and the
// paged cache's write, which rotates keys and queries on their way): elements [i, i + N) and [i + hd/2, + N)
// with the same elements of the fp32 cos/sin rows, in fp32 arithmetic rounded once to the storage type
// (rotary.h's formula).
#pragma once

#include "model/kernels/cuda_vec.cuh"

namespace meshtrain::model::cuda {

// The fp32 tables' elements for one piece: [i, i + N) and [i + hd/2, + N) of a token's cos and sin rows.
template <int N>
struct RopeTables {
  Vec<float, N> c1, c2, s1, s2;
};

template <int N>
__device__ __forceinline__ RopeTables<N> rope_tables_at(const float* cos_row, const float* sin_row, int64_t i,
                                                        int64_t half) {
  return {*reinterpret_cast<const Vec<float, N>*>(cos_row + i),
          *reinterpret_cast<const Vec<float, N>*>(cos_row + i + half),
          *reinterpret_cast<const Vec<float, N>*>(sin_row + i),
          *reinterpret_cast<const Vec<float, N>*>(sin_row + i + half)};
}

//   forward:  y1 = x1·c1 − x2·s1,   y2 = x2·c2 + x1·s2
//   backward (the transpose of forward, for ∂x from ∂y): y1 = x1·c1 + x2·s2,   y2 = x2·c2 − x1·s1
// Each as one fused multiply-add over a rounded product, spelled out: left to the compiler, the contraction
// depends on the surrounding kernel, and the kernels that share this would differ in fp32's last bit.
template <typename T, int N>
__device__ __forceinline__ void rope_rotate(bool backward, const Vec<T, N>& x1, const Vec<T, N>& x2,
                                            const RopeTables<N>& t, Vec<T, N>& y1, Vec<T, N>& y2) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float a = to_float(x1.v[k]), c = to_float(x2.v[k]);
    if (backward) {
      y1.v[k] = from_float<T>(__fmaf_rn(a, t.c1.v[k], __fmul_rn(c, t.s2.v[k])));
      y2.v[k] = from_float<T>(__fmaf_rn(c, t.c2.v[k], -__fmul_rn(a, t.s1.v[k])));
    } else {
      y1.v[k] = from_float<T>(__fmaf_rn(a, t.c1.v[k], -__fmul_rn(c, t.s1.v[k])));
      y2.v[k] = from_float<T>(__fmaf_rn(c, t.c2.v[k], __fmul_rn(a, t.s2.v[k])));
    }
  }
}

}  // namespace meshtrain::model::cuda
