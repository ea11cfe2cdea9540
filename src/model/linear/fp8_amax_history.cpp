#include "meshtrain/model/linear/fp8_amax_history.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

Fp8Cast Fp8AmaxHistory::cast(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies) {
  const bool first = !state_.defined();
  if (first) state_ = at::zeros({fp8_delayed_state_size()}, t.options().dtype(at::kInt));
  MT_CHECK(state_.device() == t.device(), "Fp8AmaxHistory: its history is on ", state_.device(), "; a tensor on ",
           t.device(), " was given");
  Fp8Cast c = fp8_cast_delayed(t, fmt, copies, state_, first);
  ++casts_;
  return c;
}

}  // namespace meshtrain::model
