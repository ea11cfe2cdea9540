// The FP8 casts of one activation shared by the linear layers that all read it — attention's q, k and v
// projections, SwiGLU's gate and up — so that it is cast once, not once per layer (model/linear/fp8_linear.h). The
// first reader casts; the next ones get the same copies while they pass the same tensor (the same storage,
// offset, sizes and strides) unchanged since (its version counter); after the last of the group's readers
// the copies are let go, so nothing outlives the forward of its layers but what autograd saves. Under delayed
// scaling the shared input is one cast site with its own amax history.
//
//   auto shared = std::make_shared<Fp8SharedInput>(3);   // wq, wk, wv
//   wq->set_fp8(s, shared); wk->set_fp8(s, shared); wv->set_fp8(s, shared);
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/model/kernels/fp8_cast.h"
#include "meshtrain/model/linear/fp8_amax_history.h"

namespace meshtrain::model {

class Fp8SharedInput {
 public:
  explicit Fp8SharedInput(int readers);

  // x2 [M, K] in FP8 (e4m3), row-major and transposed, as fp8_cast(x2, scaling, e4m3, both) gives it.
  std::shared_ptr<const Fp8Cast> cast(const at::Tensor& x2, Fp8Scaling scaling);
  // How many times cast() has cast rather than shared (for tests and profiles).
  int64_t casts_made() const { return casts_made_; }

 private:
  bool holds(const at::Tensor& x2, Fp8Scaling scaling) const;
  std::shared_ptr<const Fp8Cast> cast_now(const at::Tensor& x2, Fp8Scaling scaling);
  void let_go();

  const int readers_;
  int served_ = 0;
  int64_t casts_made_ = 0;
  at::Tensor x_;  // kept alive while shared: its storage cannot be reused by another tensor meanwhile
  int64_t version_ = 0;
  Fp8Scaling scaling_ = Fp8Scaling::off;
  std::shared_ptr<const Fp8Cast> cast_;
  Fp8AmaxHistory history_;  // delayed scaling's
};

}  // namespace meshtrain::model
