// The paged cache's write on CUDA (docs/serving.md "Decode-attention kernel"): a step's keys and values [N, H_kv,
// hd], strided views of the projection's output, copied into their cache rows in one launch for both, where
// index_copy_ of each spends two launches (a contiguous copy, then the indexed one). Graph-capturable: no host
// synchronisation, no allocation.
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

}  // namespace meshtrain::model
