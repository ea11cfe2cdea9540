#include "meshtrain/model/kernels/lt_matmul.h"

#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>
#endif

namespace meshtrain::model::lt {
namespace {

bool is_matrix(const at::Tensor& t) { return t.defined() && t.dim() == 2 && t.is_contiguous(); }

bool same_kind(const at::Tensor& t, const at::Tensor& like) {
  return t.device() == like.device() && t.scalar_type() == like.scalar_type();
}

// The epilogue's vector: present, packed, of length n, like `like`.
bool vector_ok(const at::Tensor& v, int64_t n, const at::Tensor& like) {
  return v.defined() && v.dim() == 1 && v.is_contiguous() && v.size(0) == n && same_kind(v, like);
}

// The GELU epilogues' aux matrix: out's shape and kind, its leading dimension (N) divisible by 8 (cuBLASLt).
bool aux_ok(const Gemm& g) {
  return is_matrix(g.aux) && g.aux.sizes() == g.out.sizes() && same_kind(g.aux, g.out) && g.out.size(1) % 8 == 0;
}

}  // namespace

bool layout_ok(const Gemm& g) {
  if (!is_matrix(g.a) || !is_matrix(g.b) || !is_matrix(g.out) || !g.out.is_cuda()) return false;
  const auto dt = g.a.scalar_type();
  if (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (!same_kind(g.b, g.a) || g.out.device() != g.a.device()) return false;
  // out in the inputs' dtype, or fp32 from 16-bit inputs (the accumulator written without rounding).
  if (g.out.scalar_type() != dt && g.out.scalar_type() != at::kFloat) return false;
  const int64_t m = g.out.size(0), n = g.out.size(1);
  const int64_t k = g.trans_a ? g.a.size(0) : g.a.size(1);
  if ((g.trans_a ? g.a.size(1) : g.a.size(0)) != m) return false;
  if ((g.trans_b ? g.b.size(1) : g.b.size(0)) != k || (g.trans_b ? g.b.size(0) : g.b.size(1)) != n) return false;
  if (m == 0 || n == 0 || k == 0) return false;  // nothing for cuBLASLt to reduce over; the caller's ops handle it
  if (g.c.defined()) {
    if (g.epilogue != Epilogue::kNone && g.epilogue != Epilogue::kBias) return false;
    if (!is_matrix(g.c) || g.c.sizes() != g.out.sizes() || !same_kind(g.c, g.out)) return false;
  }
  switch (g.epilogue) {
    case Epilogue::kNone:
      return true;
    case Epilogue::kBias:
      return vector_ok(g.bias, n, g.out);
    case Epilogue::kBGradB:
      return vector_ok(g.bias, m, g.out);
    case Epilogue::kGeluAuxBias:
    case Epilogue::kDGeluBGrad:
      return vector_ok(g.bias, n, g.out) && aux_ok(g);
    case Epilogue::kDGelu:
      return !g.bias.defined() && aux_ok(g);
  }
  return false;
}

#if MESHTRAIN_CUDA_KERNELS
namespace {

void check(cublasStatus_t s, const char* what) {
  MT_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt ", what, ": ", cublasLtGetStatusString(s));
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  check(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)), "set matmul attribute");
}

cudaDataType_t cuda_type(at::ScalarType t) {
  if (t == at::kBFloat16) return CUDA_R_16BF;
  if (t == at::kHalf) return CUDA_R_16F;
  return CUDA_R_32F;
}

// A row-major [rows, cols] contiguous matrix as cuBLASLt sees it: column-major [cols, rows], ld = cols.
Layout layout_of(const at::Tensor& t) {
  cublasLtMatrixLayout_t l = nullptr;
  check(cublasLtMatrixLayoutCreate(&l, cuda_type(t.scalar_type()), static_cast<uint64_t>(t.size(1)),
                                   static_cast<uint64_t>(t.size(0)), t.size(1)),
        "create layout");
  return Layout(l);
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGeluBGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kBGradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// fp32 matmuls in TF32 exactly where ATen's own (at::mm) would use it, so the two paths agree. `t` is the
// inputs' dtype: 16-bit inputs accumulate in plain fp32 whatever out's dtype.
cublasComputeType_t compute_type(at::ScalarType t) {
  if (t == at::kFloat && at::globalContext().allowTF32CuBLAS()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

// The operation descriptor in cuBLASLt's terms: its A is our b, its B our a (lt_matmul.h).
MatmulDesc matmul_desc(const Gemm& g) {
  cublasLtMatmulDesc_t d = nullptr;
  check(cublasLtMatmulDescCreate(&d, compute_type(g.a.scalar_type()), CUDA_R_32F), "create matmul");
  MatmulDesc desc(d);
  set_attr<int32_t>(d, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attr<int32_t>(d, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attr<uint32_t>(d, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
  if (g.bias.defined()) set_attr<void*>(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias.data_ptr());
  if (g.aux.defined()) {
    set_attr<void*>(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux.data_ptr());
    set_attr<int64_t>(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux.size(1));
  }
  return desc;
}

// The largest power of two (up to 256) dividing the address: what the algorithm search must respect.
uint32_t alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && addr % (2 * a) == 0) a *= 2;
  return a;
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  check(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)), "set preference");
}

Preference preference(const Gemm& g, size_t workspace_bytes) {
  cublasLtMatmulPreference_t p = nullptr;
  check(cublasLtMatmulPreferenceCreate(&p), "create preference");
  Preference pref(p);
  set_pref<uint64_t>(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  set_pref<uint32_t>(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.b.data_ptr()));
  set_pref<uint32_t>(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.a.data_ptr()));
  set_pref<uint32_t>(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                     alignment(g.c.defined() ? g.c.data_ptr() : g.out.data_ptr()));
  set_pref<uint32_t>(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.out.data_ptr()));
  return pref;
}

std::atomic<bool> tuning_on{false};

// One GEMM as cuBLASLt is asked for it: the descriptors, where it runs, its workspace.
struct Problem {
  const Gemm& g;
  cublasLtHandle_t handle;
  MatmulDesc desc;
  Layout a_layout, b_layout, d_layout;  // cuBLASLt's A is our b, its B our a; the transposes are in desc
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
};

// Whether out is also the GEMM's input c (out +=): its value must survive until the real run.
bool adds_into_out(const Gemm& g) { return g.c.defined() && g.c.data_ptr() == g.out.data_ptr(); }

// Enqueues p with `algo`, writing `out` (g.out, or a scratch matrix of its shape while timing; one that
// stands in for an out that is also c stands in for c too).
cublasStatus_t enqueue(const Problem& p, const cublasLtMatmulAlgo_t& algo, void* out) {
  const float alpha = 1.0f, beta = p.g.c.defined() ? 1.0f : 0.0f;
  const void* c = !p.g.c.defined() || adds_into_out(p.g) ? out : p.g.c.data_ptr();
  return cublasLtMatmul(p.handle, p.desc.get(), &alpha, p.g.b.data_ptr(), p.a_layout.get(), p.g.a.data_ptr(),
                        p.b_layout.get(), &beta, c, p.d_layout.get(), out, p.d_layout.get(), &algo, p.workspace,
                        p.workspace_bytes, p.stream);
}

// What the algorithm search depends on: the problem, the epilogue, every pointer's alignment, the workspace,
// and whether the answers are timed.
using SearchKey = std::array<int64_t, 19>;

SearchKey search_key(const Gemm& g, size_t workspace_bytes) {
  const auto align_of = [](const at::Tensor& t) { return t.defined() ? int64_t{alignment(t.data_ptr())} : 0; };
  const auto in_dt = g.a.scalar_type();
  const int64_t k = g.trans_a ? g.a.size(0) : g.a.size(1);
  return {g.out.device().index(), static_cast<int64_t>(in_dt), static_cast<int64_t>(g.out.scalar_type()),
          static_cast<int64_t>(compute_type(in_dt)),
          g.out.size(0), g.out.size(1), k, g.trans_a, g.trans_b, static_cast<int64_t>(g.epilogue),
          align_of(g.a), align_of(g.b), align_of(g.out), align_of(g.bias), align_of(g.aux),
          static_cast<int64_t>(workspace_bytes), g.c.defined(), align_of(g.c), tuning_on.load()};
}

// The heuristic's answers for p, best first: at most `count`.
std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Problem& p, int count) {
  const auto pref = preference(p.g, p.workspace_bytes);
  std::vector<cublasLtMatmulHeuristicResult_t> results(count);
  int found = 0;
  const auto s = cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc.get(), p.a_layout.get(), p.b_layout.get(),
                                                p.d_layout.get(), p.d_layout.get(), pref.get(), count,
                                                results.data(), &found);
  results.resize(s == CUBLAS_STATUS_SUCCESS ? found : 0);
  return results;
}

// Whether p's candidates can be timed now: not while its stream is captured into a CUDA graph (no
// synchronisation there), and only where the epilogue writes nothing but out.
bool can_time(const Problem& p) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(p.stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) return false;
  return p.g.epilogue == Epilogue::kNone || p.g.epilogue == Epilogue::kBias;
}

// Milliseconds per run of `algo` writing `out` (the mean of a few after a warm-up); +inf where it fails.
float time_algo(const Problem& p, const cublasLtMatmulAlgo_t& algo, void* out) {
  constexpr int kRepeats = 3;
  constexpr float kFailed = std::numeric_limits<float>::infinity();
  if (enqueue(p, algo, out) != CUBLAS_STATUS_SUCCESS) return kFailed;
  cudaEvent_t start = nullptr, end = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess) return kFailed;
  if (cudaEventCreate(&end) != cudaSuccess) {
    cudaEventDestroy(start);
    return kFailed;
  }
  bool ok = cudaEventRecord(start, p.stream) == cudaSuccess;
  for (int i = 0; ok && i < kRepeats; ++i) ok = enqueue(p, algo, out) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cudaEventRecord(end, p.stream) == cudaSuccess && cudaEventSynchronize(end) == cudaSuccess;
  float ms = kFailed;
  if (ok && cudaEventElapsedTime(&ms, start, end) != cudaSuccess) ms = kFailed;
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return ok ? ms / kRepeats : kFailed;
}

// The fastest of the candidates on this device (the first where none can be timed).
cublasLtMatmulAlgo_t fastest(const Problem& p, const std::vector<cublasLtMatmulHeuristicResult_t>& candidates) {
  if (candidates.size() == 1 || !can_time(p)) return candidates[0].algo;
  at::Tensor out = p.g.out;  // rewritten by the real run after the timing
  if (adds_into_out(p.g)) {  // out's value is an input: time into a scratch matrix instead
    try {
      out = at::empty_like(p.g.out);
    } catch (const c10::OutOfMemoryError&) {
      return candidates[0].algo;
    }
  }
  size_t best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i)
    if (const float ms = time_algo(p, candidates[i].algo, out.data_ptr()); ms < best_ms) best = i, best_ms = ms;
  return candidates[best].algo;
}

// The kernel for a problem, chosen once per SearchKey (a search costs tens of µs on the host, tuning a few
// GEMMs; a training step repeats the same few shapes); nullopt where cuBLASLt has none.
std::optional<cublasLtMatmulAlgo_t> find_algo(const Problem& p) {
  constexpr int kTunedCandidates = 8;
  static std::mutex mu;
  static std::map<SearchKey, std::optional<cublasLtMatmulAlgo_t>> found_before;
  const auto key = search_key(p.g, p.workspace_bytes);
  const std::lock_guard lock(mu);
  if (auto it = found_before.find(key); it != found_before.end()) return it->second;
  const auto candidates = heuristic(p, tuning_on ? kTunedCandidates : 1);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (!candidates.empty()) algo = fastest(p, candidates);
  return found_before[key] = algo;
}

}  // namespace

bool run(const Gemm& g) {
  if (!layout_ok(g)) return false;
  const c10::DeviceGuard guard(g.out.device());
  const Problem p{g,
                  at::cuda::getCurrentCUDABlasLtHandle(),
                  matmul_desc(g),
                  layout_of(g.b),
                  layout_of(g.a),
                  layout_of(g.out),
                  at::cuda::getCUDABlasLtWorkspace(),
                  at::cuda::getCUDABlasLtWorkspaceSize(),
                  c10::cuda::getCurrentCUDAStream(g.out.device().index()).stream()};
  const auto algo = find_algo(p);
  if (!algo) return false;  // no kernel for this epilogue, dtype and alignment
  check(enqueue(p, *algo, g.out.data_ptr()), "matmul");
  return true;
}

void set_tuning(bool on) { tuning_on = on; }
bool tuning() { return tuning_on; }
#else
bool run(const Gemm& g) {
  (void)g;
  return false;
}

void set_tuning(bool on) { (void)on; }
bool tuning() { return false; }
#endif

}  // namespace meshtrain::model::lt
