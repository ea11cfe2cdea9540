// Reduce kernels; see reduce_kernels.h. Compiled at -O3: these loops are the CPU backend's arithmetic hot
// path and gcc only vectorises them fully there (RelWithDebInfo builds use -O2).
#pragma GCC optimize("O3")

#include "comm/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

bool is_supported_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Half:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
      return true;
    default:
      return false;
  }
}

void check_supported_dtype(c10::ScalarType t, const std::string& what) {
  MT_USER_CHECK(is_supported_dtype(t), what, ": dtype ", c10::toString(t),
                " is not supported by the CPU communicator (valid: float32, bfloat16, float16, int32, int64)");
}

std::size_t dtype_size(c10::ScalarType t) { return c10::elementSize(t); }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {

// NaN propagates through max/min, as in torch.
template <typename A>
inline A op_max(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return (a != a || a > b) ? a : b;
  } else {
    return std::max(a, b);
  }
}
template <typename A>
inline A op_min(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return (a != a || a < b) ? a : b;
  } else {
    return std::min(a, b);
  }
}

// T: storage type; A: arithmetic type (float for half types).
template <typename T, typename A>
void reduce_into_t(T* __restrict dst, const T* __restrict src, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<A>(dst[i]) + static_cast<A>(src[i]));
      break;
    case ReduceOp::Max:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op_max<A>(static_cast<A>(dst[i]), static_cast<A>(src[i])));
      break;
    case ReduceOp::Min:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op_min<A>(static_cast<A>(dst[i]), static_cast<A>(src[i])));
      break;
  }
}

template <typename T, typename A>
void divide_t(T* data, std::size_t n, int divisor) {
  if constexpr (std::is_floating_point_v<A>) {
    const A inv = A(1) / static_cast<A>(divisor);
    // Multiply by the reciprocal for speed, except where it is not exact: x/3 and x*(1/3) differ in the last bit.
    if ((divisor & (divisor - 1)) == 0) {
      for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<A>(data[i]) * inv);
    } else {
      for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<A>(data[i]) / static_cast<A>(divisor));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
  }
}

template <typename T, typename A>
void reduce_many_t(T* dst, const void* const* srcs, int count, std::size_t n, ReduceOp op) {
  // Blocked so that the fp32 accumulator stays in L1 while every source streams through it once.
  constexpr std::size_t kBlock = 2048;
  A acc[kBlock];
  for (std::size_t base = 0; base < n; base += kBlock) {
    const std::size_t m = std::min(kBlock, n - base);
    const T* s0 = static_cast<const T*>(srcs[0]) + base;
    for (std::size_t i = 0; i < m; ++i) acc[i] = static_cast<A>(s0[i]);
    for (int k = 1; k < count; ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + base;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          for (std::size_t i = 0; i < m; ++i) acc[i] += static_cast<A>(s[i]);
          break;
        case ReduceOp::Max:
          for (std::size_t i = 0; i < m; ++i) acc[i] = op_max<A>(acc[i], static_cast<A>(s[i]));
          break;
        case ReduceOp::Min:
          for (std::size_t i = 0; i < m; ++i) acc[i] = op_min<A>(acc[i], static_cast<A>(s[i]));
          break;
      }
    }
    if (op == ReduceOp::Avg) {
      for (std::size_t i = 0; i < m; ++i) acc[i] /= static_cast<A>(count);
    }
    T* d = dst + base;
    for (std::size_t i = 0; i < m; ++i) d[i] = static_cast<T>(acc[i]);
  }
}

template <template <typename, typename> class F, typename... Args>
void dispatch(c10::ScalarType t, Args&&... args) {
  switch (t) {
    case c10::ScalarType::Float: return F<float, float>::run(args...);
    case c10::ScalarType::BFloat16: return F<c10::BFloat16, float>::run(args...);
    case c10::ScalarType::Half: return F<c10::Half, float>::run(args...);
    case c10::ScalarType::Int: return F<std::int32_t, std::int64_t>::run(args...);  // no signed overflow UB
    case c10::ScalarType::Long: return F<std::int64_t, std::int64_t>::run(args...);
    default: check_supported_dtype(t, "reduce");
  }
}

template <typename T, typename A>
struct ReduceInto {
  static void run(void* dst, const void* src, std::size_t n, ReduceOp op) {
    reduce_into_t<T, A>(static_cast<T*>(dst), static_cast<const T*>(src), n, op);
  }
};
template <typename T, typename A>
struct DivideBy {
  static void run(void* data, std::size_t n, int divisor) { divide_t<T, A>(static_cast<T*>(data), n, divisor); }
};
template <typename T, typename A>
struct ReduceMany {
  static void run(void* dst, const void* const* srcs, int count, std::size_t n, ReduceOp op) {
    reduce_many_t<T, A>(static_cast<T*>(dst), srcs, count, n, op);
  }
};

}  // namespace

void reduce_into(void* dst, const void* src, std::size_t n, c10::ScalarType t, ReduceOp op) {
  if (n == 0) return;
  dispatch<ReduceInto>(t, dst, src, n, op);
}

void divide_by(void* data, std::size_t n, c10::ScalarType t, int divisor) {
  MT_CHECK(divisor > 0, "divide_by: divisor ", divisor);
  if (n == 0 || divisor == 1) return;
  dispatch<DivideBy>(t, data, n, divisor);
}

void reduce_many(void* dst, const void* const* srcs, int count, std::size_t n, c10::ScalarType t, ReduceOp op) {
  MT_CHECK(count >= 1, "reduce_many: count ", count);
  if (n == 0) return;
  dispatch<ReduceMany>(t, dst, srcs, count, n, op);
}

}  // namespace meshtrain::comm
