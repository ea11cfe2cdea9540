// One FP8 cast site under delayed scaling (train.fp8=delayed): the operand cast there — a layer's input, its
// weight, or the gradient of its output — is scaled from the amaxes of the casts before it at the same site (the
// largest finite one of the last 16), not from its own, so the cast is one pass over the tensor instead of two
// (model/kernels/fp8_cast.h, fp8_cast_delayed); its own amax is recorded for the casts after it. The history
// lives on the device, so a CUDA graph replays it. The site's first cast, having no history, is scaled from its
// own amax (as tensorwise). Histories are not checkpointed: a resumed run's first casts start them again.
//
//   Fp8AmaxHistory w;                                        // one per site
//   const Fp8Cast c = w.cast(weight, at::kFloat8_e4m3fn, Fp8Copies::both);
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>

#include "meshtrain/model/kernels/fp8_cast.h"

namespace meshtrain::model {

class Fp8AmaxHistory {
 public:
  // t [R, C]'s copies in `fmt`, one scale for both, from this site's history; t's amax recorded into it. The
  // history is made on t's device at the first cast; every later t must be on that device.
  Fp8Cast cast(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies);
  // How many casts this site has made (counted on the host).
  int64_t casts() const { return casts_; }
  // The device state (int32, laid out as src/model/kernels/fp8_delayed_state.h says); undefined before the first
  // cast.
  const at::Tensor& state() const { return state_; }

 private:
  at::Tensor state_;
  int64_t casts_ = 0;
};

// The sites of one FP8 linear layer. Held by the layer and, through its backward's cast, by autograd (hence an
// intrusive pointer: autograd's saved data holds it as a capsule).
struct Fp8LinearHistories : torch::CustomClassHolder {
  Fp8AmaxHistory input;        // unused where the layer's input casts are shared (Fp8SharedInput has its own)
  Fp8AmaxHistory weight;
  Fp8AmaxHistory grad_output;
};

}  // namespace meshtrain::model
