// SnapshotStaging: an in-memory checkpoint's copy of a rank's state into host memory, taken off the step loop on a
// GPU. Device tensors are copied into pinned buffers (kept from one snapshot to the next, so no fresh pages) on a
// copy stream of their own, after the work that made them, while the next step's forward and backward run; host
// tensors (the RNG states, an offloaded optimizer's state) are copied at once, since training changes them in
// place on the host. Two orderings keep the copy exact:
//   - the writer reads the buffers only once the copies have landed (landed(), called on the writer's thread);
//   - the next update of the state waits for the copies before it overwrites what they read (before_update(): the
//     compute stream is ordered after the copy stream; the forward and backward before it only read the state;
//     an offloaded optimizer, which may upload parameters during the backward, waits before the step instead).
// On the CPU it is a plain copy into the reused buffers, as a disk checkpoint's staging.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::train {

class SnapshotStaging {
 public:
  // `blocks` with every tensor replaced by this rank's private host copy; those of device tensors are still landing
  // until landed() returns. The previous snapshot's writer must be done with the buffers (HostCheckpoints::wait()).
  std::vector<ShardedTensor> stage(const std::vector<ShardedTensor>& blocks);
  // A function that blocks its caller until the last stage()'s device copies have landed (for the writer's thread;
  // it holds what it waits on, so a later stage() does not change it).
  std::function<void()> landed() const;
  // Orders the compute stream's next work after the last stage()'s device copies (once per stage()); no-op when
  // nothing is pending.
  void before_update();

 private:
  std::map<std::string, at::Tensor> buffers_;  // by block name
  std::optional<c10::Stream> copy_stream_;
  std::shared_ptr<c10::Event> copied_;  // recorded on copy_stream_ after the last stage()'s copies
  bool update_waits_ = false;           // before_update() has yet to order the compute stream after copied_
};

}  // namespace meshtrain::train
