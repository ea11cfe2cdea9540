#include "meshtrain/model/kernels/column_sum.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/column_sum_cuda.h"
#endif

namespace meshtrain::model {
namespace {

bool kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

}  // namespace

at::Tensor column_sum(const at::Tensor& x, at::ScalarType out_dtype) {
  MT_CHECK(x.dim() == 2, "column_sum: a matrix expected, got ", x.sizes());
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && kernel_dtype(x.scalar_type()) && kernel_dtype(out_dtype)) {
    const c10::DeviceGuard guard(x.device());
    const auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto part = at::empty({cuda::column_sum_chunks(rows), cols}, xc.options().dtype(at::kFloat));
    auto out = at::empty({cols}, xc.options().dtype(out_dtype));
    void* stream = cuda::stream_of(xc);
    cuda::check_launch(cuda::column_sum_partials(cuda::dtype_of(xc), xc.const_data_ptr(), rows, cols,
                                                 part.mutable_data_ptr<float>(), stream),
                       "column sum (partials)");
    cuda::check_launch(cuda::column_sum_finish(part.const_data_ptr<float>(), part.size(0), cols,
                                               cuda::dtype_of(out), out.mutable_data_ptr(), stream),
                       "column sum (finish)");
    return out;
  }
#endif
  return x.sum(0, /*keepdim=*/false, at::kFloat).to(out_dtype);
}

}  // namespace meshtrain::model
