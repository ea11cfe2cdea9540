#include "meshtrain/model/kernels/paged_decode.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "model/kernels/paged_decode_cuda.h"
#endif

namespace meshtrain::model {

bool paged_decode_supported(const at::Tensor& q, const at::Tensor& k_cache) {
#if MESHTRAIN_CUDA_KERNELS
  if (!q.is_cuda() || k_cache.device() != q.device() || k_cache.scalar_type() != q.scalar_type()) return false;
  const auto dt = q.scalar_type();
  if (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (q.dim() != 3 || k_cache.dim() != 4) return false;
  const int64_t hd = q.size(2);
  if ((hd != 64 && hd != 128) || k_cache.size(3) != hd) return false;
  if (k_cache.size(2) < 1 || q.size(1) % k_cache.size(2) != 0) return false;
  return cuda::rows_allow_16_byte_loads(k_cache);  // q is copied where its rows are not; the cache never is
#else
  (void)q;
  (void)k_cache;
  return false;
#endif
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens) {
  MT_CHECK(paged_decode_supported(q, k_cache), "paged_decode_attention: no kernel for q ", q.sizes(), " ",
           q.scalar_type(), " on ", q.device(), " over a cache ", k_cache.sizes(), " ", k_cache.scalar_type());
  MT_CHECK(v_cache.sizes() == k_cache.sizes() && v_cache.strides() == k_cache.strides() &&
               v_cache.scalar_type() == k_cache.scalar_type() && v_cache.device() == k_cache.device() &&
               cuda::rows_allow_16_byte_loads(v_cache),
           "paged_decode_attention: values ", v_cache.sizes(), " unlike keys ", k_cache.sizes());
  const int64_t B = q.size(0);
  MT_CHECK(block_tables.dim() == 2 && block_tables.size(0) == B && block_tables.scalar_type() == at::kInt &&
               block_tables.device() == q.device() && (block_tables.size(1) <= 1 || block_tables.stride(1) == 1),
           "paged_decode_attention: block tables [", B, ", max_blocks] int32 on ", q.device(), " expected, got ",
           block_tables.sizes(), " ", block_tables.scalar_type());
  MT_CHECK(context_lens.dim() == 1 && context_lens.size(0) == B && context_lens.scalar_type() == at::kInt &&
               context_lens.device() == q.device() && (B <= 1 || context_lens.stride(0) == 1),
           "paged_decode_attention: context lengths [", B, "] int32 on ", q.device(), " expected, got ",
           context_lens.sizes(), " ", context_lens.scalar_type());
#if MESHTRAIN_CUDA_KERNELS
  const c10::DeviceGuard guard(q.device());
  const at::Tensor qv = cuda::rows_allow_16_byte_loads(q) ? q : q.contiguous();
  auto out = at::empty({B, q.size(1), q.size(2)}, q.options());
  cuda::PagedDecodeShape s;
  s.B = B;
  s.H = q.size(1);
  s.Hkv = k_cache.size(2);
  s.hd = q.size(2);
  s.block_size = k_cache.size(1);
  s.max_blocks = block_tables.size(1);
  s.q_stride[0] = qv.stride(0);
  s.q_stride[1] = qv.stride(1);
  for (int d = 0; d < 3; ++d) s.cache_stride[d] = k_cache.stride(d);
  s.table_stride = block_tables.stride(0);
  cuda::plan_paged_decode(s, at::cuda::getDeviceProperties(q.device().index())->multiProcessorCount);
  // The splits' partials, from the caching allocator (a captured graph keeps its own pool).
  at::Tensor scratch;
  if (const int64_t n = cuda::paged_decode_scratch_floats(s); n > 0)
    scratch = at::empty({n}, q.options().dtype(at::kFloat));
  cuda::check_launch(cuda::paged_decode(cuda::dtype_of(qv), s, qv.const_data_ptr(), k_cache.const_data_ptr(),
                                        v_cache.const_data_ptr(), block_tables.const_data_ptr<int32_t>(),
                                        context_lens.const_data_ptr<int32_t>(),
                                        scratch.defined() ? scratch.mutable_data_ptr<float>() : nullptr,
                                        out.mutable_data_ptr(), cuda::stream_of(qv)),
                     "paged decode attention");
  return out;
#else
  MT_CHECK(false, "paged_decode_attention: built without CUDA kernels");
  return {};
#endif
}

}  // namespace meshtrain::model
