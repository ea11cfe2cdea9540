// The state of one cast site under delayed scaling (train.fp8=delayed), as the FP8 cast kernel (fp8_cast.cu) and
// the composite that defines it (fp8_cast.cpp) both lay it out: kDelayedStateInts int32, zeros before the
// site's first cast. [kDelayedCalls] counts its casts, [kDelayedBlocksDone] the kernel's blocks of the running one
// that have finished, and kAmaxSlots fp32 amaxes (their bits) follow from kDelayedFirstSlot. Cast number n
// records its tensor's amax into slot n % kAmaxSlots and is scaled from the largest finite amax of the other
// slots: the last kAmaxWindow casts'. The site's first cast has no history; a pass over its tensor fills its
// slot first and it is scaled from all of them (its own amax, as tensorwise). The cast that finishes moves the
// count on and empties the slot the next one records into (the oldest), so the state lives on the device alone
// and a CUDA graph replays the casts as they ran. A NaN amax is recorded as kAmaxNanBits (above every other
// value's bits, as the kernel's atomic maximum on the bits orders them).
#pragma once

namespace meshtrain::model {

constexpr int kAmaxWindow = 16;
constexpr int kAmaxSlots = kAmaxWindow + 1;
constexpr int kDelayedCalls = 0, kDelayedBlocksDone = 1, kDelayedFirstSlot = 2;
constexpr int kDelayedStateInts = kDelayedFirstSlot + kAmaxSlots;
constexpr int kAmaxNanBits = 0x7fffffff;

}  // namespace meshtrain::model
