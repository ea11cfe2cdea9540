// Decode attention over a paged KV cache: one query per sequence against its keys and values read in place
// through its block-table row. Decode is bound by reading the cache, so the layout of the work serves that:
//
// - One CTA per (sequence, KV head, split of the context). The query heads of a GQA group (up to kMaxGroup
//   of them; more take several CTAs) share the CTA, so each key and value is read from memory once per group.
// - A "thread group" of TPT threads holds one token's head vector, each thread 16 bytes of it (one vector
//   load), so a warp reads whole, contiguous head rows, several tokens side by side.
// - Each warp walks its own tokens of the split with its own running maximum (online softmax, fp32, base 2
//   with log2(e) folded into the query's scale). Its keys and values reach shared memory by asynchronous
//   copies (cp.async) two passes ahead of the arithmetic, and the block ids of the pass after those are
//   prefetched into registers, so the cache is being read while the warp works: per pass it waits for its
//   copies, takes the scores, the warp's new maximum by shuffles, and adds probability × value into its fp32
//   accumulators. Each thread reads back only the slots it copied itself, so the loop has no barrier at all.
//   The CTA's warps meet once at the end, where their (max, sum, output) are combined in shared memory.
// - Split-K: the grid has `splits` CTAs per (sequence, head group), a count from the shape alone (the batch,
//   the heads, the table's width and the GPU's SMs), so a captured graph replays with any lengths. Each
//   sequence cuts its own context (read on the device) into as many equal runs as it fills, each at least
//   kMinSplitTokens long, up to `splits`: a short context at batch 1 still spreads over many SMs, a long
//   batch splits only as far as it fills the GPU, and the CTAs a sequence leaves idle exit at once. A
//   sequence of one run writes its normalised output directly; one of several writes (max, sum, unnormalised
//   output) per run in fp32, and a second kernel combines the runs of those sequences.
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
constexpr int kMaxGroup = 8;          // query heads a CTA holds (q and the accumulator are registers per head)
constexpr int kMinSplitTokens = 32;   // about one pass of the CTA's warps: shorter runs cost more to combine
constexpr int64_t kMaxSplits = 64;
constexpr int kCtasPerSm = 4;  // what fits at once for a GQA group of 4 (registers, shared memory): the split
                               // count aims for this many per SM
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

// Query heads per CTA for a GQA group of g: the next power of two, at most kMaxGroup.
int64_t decode_group_tile(int64_t g) {
  int64_t t = 1;
  while (t < g && t < kMaxGroup) t *= 2;
  return t;
}

template <typename T, int HD, int GT>
struct DecodeTile {
  static constexpr int kVec = kVec16<T>;   // head-dim elements per thread (one 16-byte load)
  static constexpr int kTpt = HD / kVec;   // threads per token
  static constexpr int kTpw = 32 / kTpt;   // tokens a warp reads side by side
  // Rows of kTpw tokens a warp has in flight: four, or two where eight heads' queries and accumulators
  // already take most of the registers.
  static constexpr int kUnroll = GT >= 8 ? 2 : 4;
  static constexpr int kWarpTokens = kTpw * kUnroll;  // tokens a warp takes per pass
  static_assert(HD % kVec == 0 && kTpt <= 32 && 32 % kTpt == 0, "a token's head vector must fit one warp");
};

// How sequence b cuts its context of ctx positions: `live` runs (1 ≤ live ≤ splits) of `run` positions, the
// last one shorter or, rarely, empty. The decode kernel and the combine kernel both derive it from ctx.
struct DecodeRuns {
  int live, run;
};

__device__ __forceinline__ DecodeRuns decode_runs(int ctx, int splits) {
  const int live = max(1, min(splits, (ctx + kMinSplitTokens - 1) / kMinSplitTokens));
  return {live, (ctx + live - 1) / live};
}

__device__ __forceinline__ int decode_context(const PagedDecodeShape& s, const int32_t* context_lens, int64_t b) {
  // Clamped to what the table row can address, so a bad length reads no entry past the row; 0 (a padding row)
  // gives an empty run, hence zeros.
  return max(0, min(context_lens[b], static_cast<int>(s.max_blocks * s.block_size)));
}

// Where the runs' partial results live in the scratch: out [B·H, splits, hd], then max and sum [B·H, splits].
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

// 16 bytes from global to shared memory without passing through registers; zeros where !live (src-size 0).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool live) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(live ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One warp's walk over its tokens: passes of kWarpTokens tokens through the warp's two shared-memory stages.
// A pass's copies are issued as the pass two before it is done, so the next pass's are in flight into one
// stage while the other is worked on. Holds the warp's running maximum m and the thread's token group's sum l
// (every group of the warp shares m, so the groups' sums and accumulators add up plainly at the end).
template <typename T, int HD, int GT>
struct DecodeWarp {
  using Tile = DecodeTile<T, HD, GT>;
  static constexpr int kVec = Tile::kVec, kTpt = Tile::kTpt, kTpw = Tile::kTpw, kU = Tile::kUnroll;
  static constexpr int kStageVecs = kU * 2 * 32;  // a pass: per row u, keys then values, 16 bytes a lane
  using V = Vec<T, kVec>;

  float q[GT][kVec];    // the thread's piece of each query head, pre-scaled
  float acc[GT][kVec];  // Σ p · v over the group's tokens
  float m[GT], l[GT];

  const T* kc;
  const T* vc;
  const int32_t* table;
  int64_t block_stride, slot_stride, head_off;
  int bs, t1, grp, lane;

  // Block ids of the thread's tokens in the pass at `base` (0 past t1: never read).
  __device__ __forceinline__ void load_ids(int base, int (&ids)[kU]) const {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + u * kTpw + grp;
      ids[u] = t < t1 ? table[t / bs] : 0;
    }
  }

  __device__ __forceinline__ void issue(V* stage, int base, const int (&ids)[kU]) const {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + u * kTpw + grp;
      const bool live = t < t1;
      const int64_t off = live ? ids[u] * block_stride + static_cast<int64_t>(t % bs) * slot_stride + head_off : 0;
      cp_async16(&stage[(2 * u) * 32 + lane], kc + off, live);
      cp_async16(&stage[(2 * u + 1) * 32 + lane], vc + off, live);
    }
  }

  // The pass at `base` from its stage: scores (each thread's partial dot products summed over its group's kTpt
  // lanes, an aligned run of the warp, so xor offsets below kTpt stay inside it), the warp's new maximum (the
  // pass's first token, base, is live, so it is finite), the factor that moves what was summed under the old
  // one, then the probabilities and Σ p · v. Masked tokens were copied as zeros and score −inf.
  __device__ __forceinline__ void work(const V* stage, int base) {
    float p[kU][GT];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const V kv = stage[(2 * u) * 32 + lane];
      const bool live = base + u * kTpw + grp < t1;
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < kVec; ++j) d += q[g][j] * to_float(kv.v[j]);
#pragma unroll
        for (int off = kTpt / 2; off > 0; off /= 2) d += __shfl_xor_sync(kFullMask, d, off);
        p[u][g] = live ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float top = p[0][g];
#pragma unroll
      for (int u = 1; u < kU; ++u) top = fmaxf(top, p[u][g]);
#pragma unroll
      for (int off = kTpt; off < 32; off *= 2) top = fmaxf(top, __shfl_xor_sync(kFullMask, top, off));
      const float m_new = fmaxf(m[g], top);
      const float a = exp2f(m[g] - m_new);  // 0 on the first pass (m = −inf)
      m[g] = m_new;
      l[g] *= a;
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[g][j] *= a;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        p[u][g] = exp2f(p[u][g] - m_new);  // 0 for a masked token
        l[g] += p[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const V vv = stage[(2 * u + 1) * 32 + lane];
      float vf[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) vf[j] = to_float(vv.v[j]);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[g][j] += p[u][g] * vf[j];
    }
  }

  // Every pass base0, base0 + step, ... below t1, through the two stages. A commit group per pass (an empty
  // one past the last) keeps "all but the newest group done" meaning "this pass has landed".
  __device__ __forceinline__ void walk(V (*stages)[kStageVecs], int base0, int step) {
    const int passes = base0 < t1 ? (t1 - base0 + step - 1) / step : 0;
    int ids[kU];
    if (passes > 0) {
      load_ids(base0, ids);
      issue(stages[0], base0, ids);
    }
    cp_async_commit();
    if (passes > 1) {
      load_ids(base0 + step, ids);
      issue(stages[1], base0 + step, ids);
    }
    cp_async_commit();
    if (passes > 2) load_ids(base0 + 2 * step, ids);
    for (int i = 0; i < passes; ++i) {
      cp_async_wait<1>();
      work(stages[i % 2], base0 + i * step);
      if (i + 2 < passes) {  // into the stage just worked on: this thread's reads of it are done
        issue(stages[i % 2], base0 + (i + 2) * step, ids);
        if (i + 3 < passes) load_ids(base0 + (i + 3) * step, ids);
      }
      cp_async_commit();
    }
    cp_async_wait<0>();
  }

  // Sums the groups' l and accumulators across the warp (xor offsets kTpt and up cross groups): lanes below
  // kTpt then hold the warp's.
  __device__ __forceinline__ void reduce_groups() {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
#pragma unroll
      for (int off = kTpt; off < 32; off *= 2) {
        l[g] += __shfl_xor_sync(kFullMask, l[g], off);
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[g][j] += __shfl_xor_sync(kFullMask, acc[g][j], off);
      }
    }
  }
};

// Grid (splits, H_kv · chunks, B): CTA (split, kvh · chunks + chunk, b) takes query heads
// [kvh · G + chunk · GT, + GT) ∩ kvh's group of G, over run `split` of row b's context (decode_runs).
template <typename T, int HD, int GT>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                        const int32_t* __restrict__ tables, const int32_t* __restrict__ context_lens,
                        PagedDecodeShape s, int chunks, float scale_log2, float* __restrict__ scratch,
                        T* __restrict__ out) {
  using Tile = DecodeTile<T, HD, GT>;
  using Warp = DecodeWarp<T, HD, GT>;
  constexpr int kVec = Tile::kVec, kTpt = Tile::kTpt, kWT = Tile::kWarpTokens;
  __shared__ typename Warp::V stages[kWarps][2][Warp::kStageVecs];
  __shared__ float warp_max[kWarps][GT], warp_sum[kWarps][GT];
  __shared__ float warp_out[kWarps][GT][HD];

  const int split = static_cast<int>(blockIdx.x);
  const int64_t b = blockIdx.z;
  const int ctx = decode_context(s, context_lens, b);
  const DecodeRuns runs = decode_runs(ctx, static_cast<int>(s.splits));
  if (split >= runs.live) return;  // a run this sequence does not need: the combine reads only the live ones
  const int t0 = min(ctx, split * runs.run), t1 = min(ctx, t0 + runs.run);

  const int kvh = static_cast<int>(blockIdx.y) / chunks, chunk = static_cast<int>(blockIdx.y) % chunks;
  const int group_size = static_cast<int>(s.H / s.Hkv);
  const int head0 = kvh * group_size + chunk * GT;  // this CTA's first query head
  const int heads = min(GT, group_size - chunk * GT);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int grp = lane / kTpt, gl = lane % kTpt;  // the thread's token group in the warp, its piece of a row

  Warp w;
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    w.m[g] = -INFINITY;
    w.l[g] = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) w.acc[g][j] = 0.f;
    if (g < heads) {
      const auto qv =
          *reinterpret_cast<const Vec<T, kVec>*>(q + b * s.q_stride[0] + (head0 + g) * s.q_stride[1] + gl * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j) w.q[g][j] = to_float(qv.v[j]) * scale_log2;
    } else {  // a head past the group: computed on zeros, never stored
#pragma unroll
      for (int j = 0; j < kVec; ++j) w.q[g][j] = 0.f;
    }
  }
  w.kc = kc;
  w.vc = vc;
  w.table = tables + b * s.table_stride;
  w.block_stride = s.cache_stride[0];
  w.slot_stride = s.cache_stride[1];
  w.head_off = kvh * s.cache_stride[2] + gl * kVec;
  w.bs = static_cast<int>(s.block_size);
  w.t1 = t1;
  w.grp = grp;
  w.lane = lane;
  w.walk(stages[warp], t0 + warp * kWT, kWarps * kWT);
  w.reduce_groups();
  if (lane < kTpt) {
#pragma unroll
    for (int g = 0; g < GT; ++g)
#pragma unroll
      for (int j = 0; j < kVec; ++j) warp_out[warp][g][gl * kVec + j] = w.acc[g][j];
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      warp_max[warp][g] = w.m[g];
      warp_sum[warp][g] = w.l[g];
    }
  }
  __syncthreads();
  // The warps combined (a warp that had no tokens has max −inf and weighs 0); a run with no tokens at all
  // gives max −inf, sum 0, output 0: the neutral partial, or zeros where the run is the whole sequence.
  for (int e = tid; e < heads * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float top = -INFINITY;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) top = fmaxf(top, warp_max[v][g]);
    float o = 0.f, l = 0.f;
    if (top != -INFINITY) {
#pragma unroll
      for (int v = 0; v < kWarps; ++v) {
        const float wt = exp2f(warp_max[v][g] - top);
        o += wt * warp_out[v][g][d];
        l += wt * warp_sum[v][g];
      }
    }
    const int64_t h = head0 + g;
    if (runs.live == 1) {  // the whole context in this run: the output itself
      out[(b * s.H + h) * HD + d] = from_float<T>(l > 0.f ? o / l : 0.f);
    } else {
      const DecodePartials<float> part = decode_partials(scratch, s);
      const int64_t row = (b * s.H + h) * s.splits + split;
      part.out[row * HD + d] = o;
      if (d == 0) {
        part.max[row] = top;
        part.sum[row] = l;
      }
    }
  }
}

// One CTA per (row, head), one thread per head-dim element: out = Σ_r 2^(m_r − M)·o_r / Σ_r 2^(m_r − M)·l_r
// over the row's live runs, M their largest max. A row of one run was written by the decode kernel itself.
template <typename T>
__global__ void paged_decode_combine_kernel(PagedDecodeShape s, const int32_t* __restrict__ context_lens,
                                            const float* __restrict__ scratch, T* __restrict__ out) {
  const int64_t row = blockIdx.x;  // b · H + h
  const DecodeRuns runs = decode_runs(decode_context(s, context_lens, row / s.H), static_cast<int>(s.splits));
  if (runs.live == 1) return;
  const DecodePartials<const float> part = decode_partials(scratch, s);
  const int d = static_cast<int>(threadIdx.x);
  const float* m = part.max + row * s.splits;
  const float* l = part.sum + row * s.splits;
  const float* o = part.out + row * s.splits * s.hd + d;
  float big = -INFINITY;
  for (int i = 0; i < runs.live; ++i) big = fmaxf(big, m[i]);
  float num = 0.f, den = 0.f;
  if (big != -INFINITY) {
    for (int i = 0; i < runs.live; ++i) {
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
        s, lens, scratch, out);
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
  if (s.splits < 1 || s.splits > kMaxSplits) return "paged decode: shape not planned (plan_paged_decode)";
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
  const int64_t by_length = (s.max_blocks * s.block_size + kMinSplitTokens - 1) / kMinSplitTokens;
  const int64_t by_fill = (int64_t{kCtasPerSm} * std::max(num_sms, 1) + ctas - 1) / ctas;
  s.splits = std::clamp(std::min(by_length, by_fill), int64_t{1}, kMaxSplits);
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
