#include "meshtrain/model/linear/linear.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

#include "meshtrain/model/linear/bias_linear.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/linear/fused_linear_gelu.h"
#include "meshtrain/model/linear/master_linear.h"
#include "meshtrain/model/linear/nf4_linear.h"
#include "meshtrain/model/linear/residual_linear.h"
#include "meshtrain/model/nf4_tensor.h"

namespace meshtrain::model {
namespace {

// `q`'s shape, map and offset with its codes, absmax codes and scales as meta tensors of their sizes: what a
// layer whose storage a layout holds keeps of it (sizes answer, nothing is allocated).
Nf4Tensor sizes_of(const Nf4Tensor& q) {
  Nf4Tensor m = q;
  for (at::Tensor* t : {&m.codes, &m.absmax_codes, &m.absmax_scales})
    *t = at::empty(t->sizes(), t->options().device(at::kMeta));
  return m;
}

}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool bias, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({out, in}, opts), &weight);
  if (bias) add_parameter("bias", at::empty({out}, opts), &this->bias);
}

void LinearImpl::set_fp8(Fp8Scaling s, std::shared_ptr<Fp8SharedInput> shared) {
  fp8_ = s;
  fp8_input_ = std::move(shared);
  fp8_sites_ = s == Fp8Scaling::delayed ? c10::make_intrusive<Fp8LinearHistories>() : nullptr;
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (nf4_) return nf4_linear(x, nf4_current(), bias);
  if (fp8_weight_.defined()) return fp8_weight_linear(x, fp8_weight_, bias);
  if (fp8_ != Fp8Scaling::off && fp8_applies(x, weight))
    return fp8_linear(x, weight, bias, fp8_, fp8_input_.get(), fp8_sites_);
  if (fused_bias_ && bias.defined()) return bias_linear(x, weight, bias);
  if (master_grads_) return master_linear(x, weight, bias);  // at::linear where it does not apply
  return at::linear(x, weight, bias);
}

at::Tensor LinearImpl::forward_gelu(const at::Tensor& x, bool fused) {
  // FP8 matmuls have no GELU epilogue: forward's FP8 path, then the GELU.
  if (fused && bias.defined() && can_fuse())
    return fused_linear_gelu(x, weight, bias);
  return at::gelu(forward(x), "tanh");
}

at::Tensor LinearImpl::forward_residual(const at::Tensor& x, const at::Tensor& r) {
  if (master_grads_ && fused_adds_ && can_fuse() && residual_linear_applies(x, weight, bias, r))
    return residual_linear(x, weight, bias, r);
  return r + forward(x);
}

void LinearImpl::hold_weight_as_nf4(Nf4Tensor q) {
  MT_CHECK(!weight.requires_grad(), "hold_weight_as_nf4: only a frozen weight is held in NF4");
  MT_CHECK(q.shape == weight.sizes().vec(), "hold_weight_as_nf4: NF4 of shape ", at::IntArrayRef(q.shape),
           " for a weight of ", weight.sizes());
  const bool first = !nf4_;
  if (nf4_store_) {  // the layout holds the storage: it writes its piece of the new rows
    nf4_store_(q.as_rows());
    nf4_ = std::make_shared<const Nf4Tensor>(sizes_of(q));
    return;
  }
  nf4_ = std::make_shared<const Nf4Tensor>(std::move(q));
  if (first) retire_parameter("weight", at::empty(weight.sizes(), weight.options().device(at::kMeta)));
}

void LinearImpl::hold_nf4_rows(std::vector<at::Tensor> rows, Nf4RowStore store) {
  MT_CHECK(nf4_, "hold_nf4_rows: the weight is not held in NF4");
  MT_CHECK(rows.size() == 3 && rows[0].size(0) == nf4_->rows(), "hold_nf4_rows: 3 tensors of ", nf4_->rows(),
           " rows expected");
  nf4_ = std::make_shared<const Nf4Tensor>(sizes_of(*nf4_));
  nf4_rows_ = std::move(rows);
  nf4_store_ = std::move(store);
}

void LinearImpl::hold_weight_as_fp8(Fp8Weight w) {
  MT_CHECK(can_hold_fp8(), "hold_weight_as_fp8: ", name(), " computes more than x·Wᵀ + b on a plain weight "
           "(adapters, FP8 training matmuls, NF4, or an FP8 weight already): its weight stays as it is");
  MT_CHECK(w.defined() && w.q.sizes() == weight.sizes(), "hold_weight_as_fp8: FP8 weight of shape ",
           w.defined() ? w.q.sizes() : at::IntArrayRef{}, " for a weight of ", weight.sizes());
  fp8_weight_ = std::move(w);
  retire_parameter("weight", at::empty(weight.sizes(), weight.options().device(at::kMeta)));
}

at::Tensor LinearImpl::local_product(const at::Tensor& x, const at::Tensor& b) const {
  return fp8_weight_.defined() ? fp8_weight_linear(x, fp8_weight_, b) : at::linear(x, weight, b);
}

Nf4Tensor LinearImpl::nf4_current() const {
  // Views made when the layer runs: the layout's storage is filled then (a view checks its storage's size).
  return nf4_rows_.empty() ? *nf4_ : nf4_->over_rows(nf4_rows_);
}

at::Tensor LinearImpl::weight_values() const {
  if (nf4_) return nf4_current().dequantize(at::kFloat);
  if (fp8_weight_.defined()) return fp8_weight_.dequantize(at::kFloat);
  return weight.detach().to(at::kFloat);
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, const at::TensorOptions& opts) {
  add_parameter("weight", at::empty({num, dim}, opts), &weight);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

}  // namespace meshtrain::model
