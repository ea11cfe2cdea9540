// Reduce kernels: the element-wise arithmetic of the CPU backend, on raw buffers of one of the five supported
// dtypes. bf16/fp16 are computed in fp32 and rounded once per call (round to nearest even), so a ring step
// rounds once per hop as NCCL does, while reduce_many (the small-message path) accumulates every rank's
// contribution in fp32 and rounds once at the end. Integer Avg truncates toward zero.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <string>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm {

// fp32, bf16, fp16, int32, int64.
bool is_supported_dtype(c10::ScalarType t);
// Throws UserError naming `what` and the valid dtypes when `t` is not supported.
void check_supported_dtype(c10::ScalarType t, const std::string& what);
std::size_t dtype_size(c10::ScalarType t);
const char* reduce_op_name(ReduceOp op);

// dst[i] = op(dst[i], src[i]) for i < n. Avg reduces as Sum (divide once at the end with divide_by).
void reduce_into(void* dst, const void* src, std::size_t n, c10::ScalarType t, ReduceOp op);

// data[i] /= divisor (Avg's final step); fp32 arithmetic for half types, truncation for integers.
void divide_by(void* data, std::size_t n, c10::ScalarType t, int divisor);

// dst[i] = op over k < count of srcs[k][i], taken in k order, accumulated in fp32 for half types; Avg
// divides by `count`. dst may alias one of srcs.
void reduce_many(void* dst, const void* const* srcs, int count, std::size_t n, c10::ScalarType t, ReduceOp op);

}  // namespace meshtrain::comm
