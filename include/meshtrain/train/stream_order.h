// Ordering between a device's streams, for the offloaded optimizer's copy streams (train/offloaded_adamw.h,
// train/chunked_update.h): device-agnostic through c10's stream and event interfaces.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace meshtrain::train {

// What is queued on `later` from now on runs after what `earlier` holds so far.
inline void order_after(c10::Device device, const c10::Stream& earlier, const c10::Stream& later) {
  c10::Event e(device.type());
  e.record(earlier);
  e.block(later);
}

// The stream the layout's forward and backward run on.
inline c10::Stream compute_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace meshtrain::train
