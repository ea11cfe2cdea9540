// The paged cache's write on CUDA (docs/serving.md "Decode-attention kernel"): a step's keys and values [N, H_kv,
// hd], strided views of the projection's output, copied into their cache rows in one launch for both, where
// index_copy_ of each spends two launches (a contiguous copy, then the indexed one); with the rotary embedding
// of keys and queries in that launch too. Graph-capturable: no host synchronisation (the RoPE variant allocates
// its query output through the caching allocator, as any op in a captured graph does).
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// Whether paged_kv_write takes these: CUDA, k, v and both caches' rows [rows, H_kv, hd] of one storage type
// (fp32, bf16, fp16) on one device, unit stride along hd and 16-byte aligned rows, slots int64 [N] there too.
// False in a build without CUDA.
bool paged_kv_write_supported(const at::Tensor& k_rows, const at::Tensor& v_rows, const at::Tensor& k,
                              const at::Tensor& v, const at::Tensor& slots);

// k_rows[slots[n]] = k[n] and v_rows[slots[n]] = v[n] for every token n; a slot outside [0, rows) is not written
// (index_copy_ would stop the device). Only where paged_kv_write_supported holds.
void paged_kv_write(at::Tensor& k_rows, at::Tensor& v_rows, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& slots);

// The write with the rotary embedding in the same launch (Llama's step, where RoPE would take a launch of its
// own): whether paged_rope_kv_write takes these — paged_kv_write_supported for fp32 or bf16 (RoPE's kernel
// types), q [N, H, hd] of k's type and device with 16-byte aligned rows, half a head row whole 16-byte pieces,
// cos and sin fp32 [N, hd] contiguous there.
bool paged_rope_kv_write_supported(const at::Tensor& k_rows, const at::Tensor& v_rows, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& slots);

// → q rotated, [N, H, hd] contiguous; k rotated into k_rows[slots[n]] and v into v_rows[slots[n]] as
// paged_kv_write writes them. Row n of cos and sin is token n's: the values are fused_rope's with those tables,
// bit for bit. Only where paged_rope_kv_write_supported holds.
at::Tensor paged_rope_kv_write(at::Tensor& k_rows, at::Tensor& v_rows, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& cos, const at::Tensor& sin,
                               const at::Tensor& slots);

}  // namespace meshtrain::model
