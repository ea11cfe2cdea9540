// Decode attention over a paged KV cache: one query per sequence against its keys and values read in place
// through its block-table row. Decode is bound by reading the cache, so the layout of the work serves that:
//
// - One CTA per (sequence, KV head, split of the context). The query heads of a GQA group (up to kMaxGroup
//   of them; more take several CTAs) share the CTA, so each key and value is read from memory once per group.
// - A "thread group" of TPT threads holds one token's head vector, each thread 16 bytes of it (one vector
//   load), so a warp reads whole, contiguous head rows. The CTA walks its split in tiles: every group loads
//   the keys and values of kTokensPerGroup tokens at once (all loads in flight before any is used), the
//   scores of the tile go to shared memory, one warp per query head turns them into probabilities under the
//   running maximum (online softmax, fp32, base 2 with log2(e) folded into the query's scale), and every
//   group adds probability × value into its fp32 accumulator. The running maximum is the CTA's, not a
//   group's, so the groups' accumulators add up plainly at the end.
// - Split-K: the context is cut into `splits` equal runs (from the shape, never the values, so a captured
//   graph replays with any lengths). One split writes the normalised output directly; several write
//   (max, sum, unnormalised output) in fp32 and a second kernel combines them. A split past a sequence's
//   context writes the neutral partial (max −inf, sum 0, output 0), so the combine never reads garbage.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/kernels/cuda_vec.cuh"
#include "model/kernels/paged_decode_cuda.h"

namespace meshtrain::model::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps a CTA
constexpr int kWarps = kThreads / 32;
constexpr int kTokensPerGroup = 4;  // tokens whose keys and values one thread group has in flight per tile
constexpr int kMaxGroup = 8;        // query heads a CTA holds (q and the accumulator are registers per head)
constexpr int64_t kMinSplitTokens = 128;  // shorter splits spend more on the combine than they save
constexpr int64_t kMaxSplits = 64;
constexpr int kCtasPerSm = 4;  // about what fits at once; the split count aims for this many per SM
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

// Query heads per CTA for a GQA group of g: the next power of two, at most kMaxGroup.
int64_t decode_group_tile(int64_t g) {
  int64_t t = 1;
  while (t < g && t < kMaxGroup) t *= 2;
  return t;
}

template <typename T, int HD>
struct DecodeTile {
  static constexpr int kVec = kVec16<T>;         // head-dim elements per thread (one 16-byte load)
  static constexpr int kTpt = HD / kVec;         // threads per token
  static constexpr int kGroups = kThreads / kTpt;  // tokens a CTA handles side by side
  static constexpr int kTile = kGroups * kTokensPerGroup;
  static_assert(HD % kVec == 0 && kTpt <= 32 && 32 % kTpt == 0, "a token's head vector must fit one warp");
};

__device__ __forceinline__ float decode_warp_max(float x) {
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

__device__ __forceinline__ float decode_warp_sum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// Where the splits' partial results live in the scratch: out [B·H, splits, hd], then max and sum [B·H, splits].
// F: float where written, const float where read.
template <typename F>
struct DecodePartials {
  F* out;
  F* max;
  F* sum;
};

template <typename F>
__device__ inline DecodePartials<F> decode_partials(F* scratch, const PagedDecodeShape& s) {
  const int64_t rows = s.B * s.H * s.splits;
  return {scratch, scratch + rows * s.hd, scratch + rows * (s.hd + 1)};
}

// Grid (splits, H_kv · chunks, B): CTA (split, kvh · chunks + chunk, b) takes query heads
// [kvh · G + chunk · GT, + GT) ∩ kvh's group of G, over positions [split · split_tokens, + split_tokens) ∩
// [0, context_lens[b]).
template <typename T, int HD, int GT>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                        const int32_t* __restrict__ tables, const int32_t* __restrict__ context_lens,
                        PagedDecodeShape s, int chunks, float scale_log2, float* __restrict__ scratch,
                        T* __restrict__ out) {
  using Tile = DecodeTile<T, HD>;
  constexpr int kVec = Tile::kVec, kTpt = Tile::kTpt, kGroups = Tile::kGroups, kTile = Tile::kTile;
  __shared__ float prob[GT][kTile];  // the tile's scores, then its probabilities
  __shared__ float run_max[GT], run_sum[GT], rescale[GT];
  __shared__ float warp_out[kWarps][GT][HD];

  const int split = static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y) / chunks, chunk = static_cast<int>(blockIdx.y) % chunks;
  const int64_t b = blockIdx.z;
  const int group_size = static_cast<int>(s.H / s.Hkv);
  const int head0 = kvh * group_size + chunk * GT;  // this CTA's first query head
  const int heads = min(GT, group_size - chunk * GT);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int grp = tid / kTpt, gl = tid % kTpt;  // the thread's token group and its 16-byte piece of a head row

  // Positions [t0, t1) of this split. The length is clamped to what the table row can address, so a bad
  // length reads no entry past the row; 0 (a padding row) gives an empty split everywhere, hence zeros.
  const int max_tokens = static_cast<int>(s.max_blocks * s.block_size);
  const int ctx = max(0, min(context_lens[b], max_tokens));
  const int t0 = split * static_cast<int>(s.split_tokens);
  const int t1 = min(ctx, t0 + static_cast<int>(s.split_tokens));

  // Stores head (head0 + g)'s element d: unnormalised output o with its (max, sum) m and l.
  auto store = [&](int g, int d, float o, float m, float l) {
    const int64_t h = head0 + g;
    if (s.splits == 1) {  // no scratch: the output itself
      out[(b * s.H + h) * HD + d] = from_float<T>(l > 0.f ? o / l : 0.f);
    } else {
      const DecodePartials<float> part = decode_partials(scratch, s);
      const int64_t row = (b * s.H + h) * s.splits + split;
      part.out[row * HD + d] = o;
      if (d == 0) {
        part.max[row] = m;
        part.sum[row] = l;
      }
    }
  };
  if (t0 >= t1) {  // past the context: the neutral partial (with one split, the zero output of an empty row)
    for (int e = tid; e < heads * HD; e += kThreads) store(e / HD, e % HD, 0.f, -INFINITY, 0.f);
    return;
  }

  // The thread's piece of each query head, scaled so that exp2 of a score difference is softmax's exp.
  float qf[GT][kVec];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (g < heads) {
      const auto qv =
          *reinterpret_cast<const Vec<T, kVec>*>(q + b * s.q_stride[0] + (head0 + g) * s.q_stride[1] + gl * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j) qf[g][j] = to_float(qv.v[j]) * scale_log2;
    } else {  // a head past the group: computed on zeros, never stored
#pragma unroll
      for (int j = 0; j < kVec; ++j) qf[g][j] = 0.f;
    }
  }
  float acc[GT][kVec];
#pragma unroll
  for (int g = 0; g < GT; ++g)
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[g][j] = 0.f;
  if (tid < GT) {
    run_max[tid] = -INFINITY;
    run_sum[tid] = 0.f;
  }  // read first after the tile loop's first barrier

  const int64_t head_off = kvh * s.cache_stride[2] + gl * kVec;
  const int32_t* table = tables + b * s.table_stride;
  const int bs = static_cast<int>(s.block_size);
  Vec<T, kVec> zero;
#pragma unroll
  for (int j = 0; j < kVec; ++j) zero.v[j] = from_float<T>(0.f);

  for (int tile = t0; tile < t1; tile += kTile) {
    // 1. Keys and values of the group's tokens tile + u·kGroups + grp (adjacent groups read adjacent slots).
    Vec<T, kVec> kv[kTokensPerGroup], vv[kTokensPerGroup];
#pragma unroll
    for (int u = 0; u < kTokensPerGroup; ++u) {
      const int t = tile + u * kGroups + grp;
      if (t < t1) {
        const int64_t off = static_cast<int64_t>(table[t / bs]) * s.cache_stride[0] +
                            static_cast<int64_t>(t % bs) * s.cache_stride[1] + head_off;
        kv[u] = *reinterpret_cast<const Vec<T, kVec>*>(kc + off);
        vv[u] = *reinterpret_cast<const Vec<T, kVec>*>(vc + off);
      } else {
        kv[u] = zero;
        vv[u] = zero;
      }
    }
    // 2. Scores: each thread's partial dot product, summed over the group's kTpt lanes (an aligned run of a
    //    warp, so xor offsets below kTpt stay inside it). Every lane takes part, masked tokens included.
#pragma unroll
    for (int u = 0; u < kTokensPerGroup; ++u) {
      float sc[GT];
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < kVec; ++j) d += qf[g][j] * to_float(kv[u].v[j]);
        sc[g] = d;
      }
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int off = kTpt / 2; off > 0; off /= 2) sc[g] += __shfl_xor_sync(kFullMask, sc[g], off);
      if (gl == 0) {
        const bool live = tile + u * kGroups + grp < t1;
#pragma unroll
        for (int g = 0; g < GT; ++g) prob[g][u * kGroups + grp] = live ? sc[g] : -INFINITY;
      }
    }
    __syncthreads();
    // 3. Online softmax, one warp per head: the new running max, the tile's probabilities under it, and the
    //    factor that moves what was accumulated under the old max to the new one. The tile's first token is
    //    live, so the new max is finite; exp2(−inf − finite) = 0 for masked tokens and for the first tile.
    for (int g = warp; g < GT; g += kWarps) {
      const float m_old = run_max[g];
      float m_tile = -INFINITY;
      for (int i = lane; i < kTile; i += 32) m_tile = fmaxf(m_tile, prob[g][i]);
      const float m_new = fmaxf(m_old, decode_warp_max(m_tile));
      float sum = 0.f;
      for (int i = lane; i < kTile; i += 32) {
        const float p = exp2f(prob[g][i] - m_new);
        prob[g][i] = p;
        sum += p;
      }
      sum = decode_warp_sum(sum);
      if (lane == 0) {
        const float a = exp2f(m_old - m_new);
        rescale[g] = a;
        run_sum[g] = run_sum[g] * a + sum;
        run_max[g] = m_new;
      }
    }
    __syncthreads();
    // 4. acc = acc · rescale + Σ p · v over the group's tokens (a masked token has p = 0 and v = 0).
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float a = rescale[g];
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[g][j] *= a;
    }
#pragma unroll
    for (int u = 0; u < kTokensPerGroup; ++u) {
      float vf[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) vf[j] = to_float(vv[u].v[j]);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        const float p = prob[g][u * kGroups + grp];
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[g][j] += p * vf[j];
      }
    }
    __syncthreads();  // the next tile overwrites prob and rescale
  }

  // The groups' accumulators summed: inside each warp by shuffles (xor offsets kTpt and up cross groups),
  // then the warps' sums through shared memory.
#pragma unroll
  for (int g = 0; g < GT; ++g)
#pragma unroll
    for (int j = 0; j < kVec; ++j)
#pragma unroll
      for (int off = kTpt; off < 32; off *= 2) acc[g][j] += __shfl_xor_sync(kFullMask, acc[g][j], off);
  if (lane < kTpt) {  // the warp's first group (gl == lane) holds the warp's sums
#pragma unroll
    for (int g = 0; g < GT; ++g)
#pragma unroll
      for (int j = 0; j < kVec; ++j) warp_out[warp][g][gl * kVec + j] = acc[g][j];
  }
  __syncthreads();
  for (int e = tid; e < heads * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += warp_out[w][g][d];
    store(g, d, o, run_max[g], run_sum[g]);
  }
}

// One CTA per (row, head), one thread per head-dim element: out = Σ_s 2^(m_s − M)·o_s / Σ_s 2^(m_s − M)·l_s
// with M the splits' largest max. Neutral partials weigh 0; a row whose every split is neutral (context 0)
// gets zeros.
template <typename T>
__global__ void paged_decode_combine_kernel(PagedDecodeShape s, const float* __restrict__ scratch,
                                            T* __restrict__ out) {
  const DecodePartials<const float> part = decode_partials(scratch, s);
  const int64_t row = blockIdx.x;  // b · H + h
  const int d = static_cast<int>(threadIdx.x);
  const float* m = part.max + row * s.splits;
  const float* l = part.sum + row * s.splits;
  const float* o = part.out + row * s.splits * s.hd + d;
  float big = -INFINITY;
  for (int64_t i = 0; i < s.splits; ++i) big = fmaxf(big, m[i]);
  float num = 0.f, den = 0.f;
  if (big != -INFINITY) {
    for (int64_t i = 0; i < s.splits; ++i) {
      const float w = exp2f(m[i] - big);
      num += w * o[i * s.hd];
      den += w * l[i];
    }
  }
  out[row * s.hd + d] = from_float<T>(den > 0.f ? num / den : 0.f);
}

template <typename T, int HD, int GT>
LaunchError launch_decode(const PagedDecodeShape& s, const T* q, const T* k, const T* v, const int32_t* tables,
                          const int32_t* lens, float* scratch, T* out, cudaStream_t stream) {
  const int64_t chunks = (s.H / s.Hkv + GT - 1) / GT;
  const dim3 grid(static_cast<unsigned>(s.splits), static_cast<unsigned>(s.Hkv * chunks),
                  static_cast<unsigned>(s.B));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(s.hd));
  paged_decode_kernel<T, HD, GT><<<grid, kThreads, 0, stream>>>(q, k, v, tables, lens, s, static_cast<int>(chunks),
                                                                scale_log2, scratch, out);
  if (s.splits > 1)
    paged_decode_combine_kernel<T><<<static_cast<unsigned>(s.B * s.H), static_cast<unsigned>(s.hd), 0, stream>>>(
        s, scratch, out);
  return launch_status();
}

template <typename T, int HD>
LaunchError launch_decode_hd(const PagedDecodeShape& s, const T* q, const T* k, const T* v, const int32_t* tables,
                             const int32_t* lens, float* scratch, T* out, cudaStream_t stream) {
  switch (decode_group_tile(s.H / s.Hkv)) {
    case 1: return launch_decode<T, HD, 1>(s, q, k, v, tables, lens, scratch, out, stream);
    case 2: return launch_decode<T, HD, 2>(s, q, k, v, tables, lens, scratch, out, stream);
    case 4: return launch_decode<T, HD, 4>(s, q, k, v, tables, lens, scratch, out, stream);
    default: return launch_decode<T, HD, kMaxGroup>(s, q, k, v, tables, lens, scratch, out, stream);
  }
}

// Why the launcher cannot take `s` (nullptr when it can): the kernel's index arithmetic and grid limits.
template <typename T>
LaunchError decode_shape_error(const PagedDecodeShape& s, const T* q, const T* k, const T* v) {
  constexpr int64_t n = kVec16<T>;
  if (s.hd != 64 && s.hd != 128) return "paged decode: head_dim must be 64 or 128";
  if (s.Hkv < 1 || s.H % s.Hkv != 0) return "paged decode: query heads must be a multiple of key/value heads";
  if (s.B > 65535 || s.Hkv * ((s.H / s.Hkv + kMaxGroup - 1) / kMaxGroup) > 65535)
    return "paged decode: batch or head count past the grid's limit (65535)";
  if (s.max_blocks * s.block_size >= (int64_t{1} << 30)) return "paged decode: block-table rows too long";
  if (s.splits < 1 || s.split_tokens < 1) return "paged decode: shape not planned (plan_paged_decode)";
  const bool strides_ok = s.q_stride[0] % n == 0 && s.q_stride[1] % n == 0 && s.cache_stride[0] % n == 0 &&
                          s.cache_stride[1] % n == 0 && s.cache_stride[2] % n == 0;
  if (!strides_ok || !aligned(q, 16) || !aligned(k, 16) || !aligned(v, 16))
    return "paged decode: q and the cache need 16-byte aligned rows";
  return nullptr;
}

}  // namespace

void plan_paged_decode(PagedDecodeShape& s, int num_sms) {
  const int64_t gt = decode_group_tile(s.H / std::max<int64_t>(s.Hkv, 1));
  const int64_t ctas = std::max<int64_t>(1, s.B * s.Hkv * ((s.H / std::max<int64_t>(s.Hkv, 1) + gt - 1) / gt));
  const int64_t max_tokens = s.max_blocks * s.block_size;
  const int64_t by_length = (max_tokens + kMinSplitTokens - 1) / kMinSplitTokens;
  const int64_t by_fill = (int64_t{kCtasPerSm} * std::max(num_sms, 1) + ctas - 1) / ctas;
  const int64_t splits = std::clamp(std::min(by_length, by_fill), int64_t{1}, kMaxSplits);
  // Equal runs; the count recomputed so that no split starts past max_tokens.
  s.split_tokens = std::max<int64_t>(1, (max_tokens + splits - 1) / splits);
  s.splits = std::max<int64_t>(1, (max_tokens + s.split_tokens - 1) / s.split_tokens);
}

int64_t paged_decode_scratch_floats(const PagedDecodeShape& s) {
  return s.splits > 1 ? s.B * s.H * s.splits * (s.hd + 2) : 0;
}

LaunchError paged_decode(DType dt, const PagedDecodeShape& shape, const void* q, const void* k_cache,
                         const void* v_cache, const int32_t* block_tables, const int32_t* context_lens,
                         float* scratch, void* out, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  return dispatch_with_half(dt, [&](auto tag) -> LaunchError {
    using T = decltype(tag);
    const auto* qp = static_cast<const T*>(q);
    const auto* kp = static_cast<const T*>(k_cache);
    const auto* vp = static_cast<const T*>(v_cache);
    if (const LaunchError e = decode_shape_error(shape, qp, kp, vp)) return e;
    if (shape.B == 0) return nullptr;
    auto* op = static_cast<T*>(out);
    if (shape.hd == 64) return launch_decode_hd<T, 64>(shape, qp, kp, vp, block_tables, context_lens, scratch, op, st);
    return launch_decode_hd<T, 128>(shape, qp, kp, vp, block_tables, context_lens, scratch, op, st);
  });
}

}  // namespace meshtrain::model::cuda
