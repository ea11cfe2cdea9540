#include "meshtrain/model/kernels/paged_kv_write.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/paged_kv_write_cuda.h"
#endif

namespace meshtrain::model {
namespace {

// [rows or N, H_kv, hd] whose rows allow 16-byte loads, hd a whole number of them.
bool vector_rows(const at::Tensor& t) {
  return t.dim() == 3 && t.size(2) % (16 / static_cast<int64_t>(t.element_size())) == 0 &&
         cuda::rows_allow_16_byte_loads(t);
}

}  // namespace

bool paged_kv_write_supported(const at::Tensor& k_rows, const at::Tensor& v_rows, const at::Tensor& k,
                              const at::Tensor& v, const at::Tensor& slots) {
#if MESHTRAIN_CUDA_KERNELS
  const auto dt = k_rows.scalar_type();
  if (!k_rows.is_cuda() || (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf)) return false;
  for (const at::Tensor* t : {&v_rows, &k, &v})
    if (t->device() != k_rows.device() || t->scalar_type() != dt || !vector_rows(*t)) return false;
  if (!vector_rows(k_rows) || v_rows.sizes() != k_rows.sizes() || v_rows.strides() != k_rows.strides()) return false;
  if (k.sizes() != v.sizes() || k.size(1) != k_rows.size(1) || k.size(2) != k_rows.size(2)) return false;
  return slots.device() == k_rows.device() && slots.scalar_type() == at::kLong && slots.dim() == 1 &&
         slots.size(0) == k.size(0) && (slots.size(0) <= 1 || slots.stride(0) == 1);
#else
  (void)k_rows;
  (void)v_rows;
  (void)k;
  (void)v;
  (void)slots;
  return false;
#endif
}

namespace {

#if MESHTRAIN_CUDA_KERNELS
cuda::PagedKvWriteShape write_shape(const at::Tensor& k_rows, const at::Tensor& k, const at::Tensor& v) {
  cuda::PagedKvWriteShape s;
  s.N = k.size(0);
  s.Hkv = k.size(1);
  s.hd = k.size(2);
  s.rows = k_rows.size(0);
  for (int d = 0; d < 2; ++d) {
    s.k_stride[d] = k.stride(d);
    s.v_stride[d] = v.stride(d);
    s.cache_stride[d] = k_rows.stride(d);
  }
  return s;
}
#endif

// cos or sin as the RoPE write reads them: fp32 [N, hd] contiguous on `like`'s device.
bool table_ok(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && t.device() == like.device() && t.scalar_type() == at::kFloat && t.dim() == 2 &&
         t.size(0) == like.size(0) && t.size(1) == like.size(2) && t.is_contiguous();
}

}  // namespace

void paged_kv_write(at::Tensor& k_rows, at::Tensor& v_rows, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& slots) {
  MT_CHECK(paged_kv_write_supported(k_rows, v_rows, k, v, slots), "paged_kv_write: no kernel for keys ", k.sizes(),
           " ", k.scalar_type(), " on ", k.device(), " into a cache ", k_rows.sizes(), " ", k_rows.scalar_type());
#if MESHTRAIN_CUDA_KERNELS
  const c10::DeviceGuard guard(k.device());
  cuda::check_launch(cuda::paged_kv_write(cuda::dtype_of(k), write_shape(k_rows, k, v), k.const_data_ptr(),
                                          v.const_data_ptr(), slots.const_data_ptr<int64_t>(),
                                          k_rows.mutable_data_ptr(), v_rows.mutable_data_ptr(), cuda::stream_of(k)),
                     "paged kv write");
#endif
}

bool paged_rope_kv_write_supported(const at::Tensor& k_rows, const at::Tensor& v_rows, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& slots) {
  // fp32 and bf16, RoPE's kernel types (fused_rope.h), so that the values are fused_rope's.
  if (k.scalar_type() == at::kHalf || !paged_kv_write_supported(k_rows, v_rows, k, v, slots)) return false;
  if (q.device() != k.device() || q.scalar_type() != k.scalar_type() || !vector_rows(q)) return false;
  if (q.size(0) != k.size(0) || q.size(2) != k.size(2)) return false;
  const int64_t piece = 16 / static_cast<int64_t>(k.element_size());
  return (k.size(2) / 2) % piece == 0 && table_ok(cos, k) && table_ok(sin, k);
}

at::Tensor paged_rope_kv_write(at::Tensor& k_rows, at::Tensor& v_rows, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& cos, const at::Tensor& sin,
                               const at::Tensor& slots) {
  MT_CHECK(paged_rope_kv_write_supported(k_rows, v_rows, q, k, v, cos, sin, slots),
           "paged_rope_kv_write: no kernel for queries ", q.sizes(), " and keys ", k.sizes(), " ", k.scalar_type(),
           " on ", k.device(), " with tables ", cos.sizes(), " into a cache ", k_rows.sizes());
  auto q_out = at::empty(q.sizes(), q.options());  // contiguous
#if MESHTRAIN_CUDA_KERNELS
  const c10::DeviceGuard guard(k.device());
  cuda::PagedRopeQ qs;
  qs.H = q.size(1);
  qs.q_stride[0] = q.stride(0);
  qs.q_stride[1] = q.stride(1);
  cuda::check_launch(
      cuda::paged_rope_kv_write(cuda::dtype_of(k), write_shape(k_rows, k, v), qs, q.const_data_ptr(),
                                k.const_data_ptr(), v.const_data_ptr(), cos.const_data_ptr<float>(),
                                sin.const_data_ptr<float>(), slots.const_data_ptr<int64_t>(),
                                q_out.mutable_data_ptr(), k_rows.mutable_data_ptr(), v_rows.mutable_data_ptr(),
                                cuda::stream_of(k)),
      "paged RoPE kv write");
#endif
  return q_out;
}

}  // namespace meshtrain::model
