#include "meshtrain/train/snapshot_staging.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace meshtrain::train {
namespace {

// The reused host buffer for `t`: pinned for a device tensor (a DMA at the bus's speed, asynchronous).
at::Tensor& buffer_for(std::map<std::string, at::Tensor>& buffers, const std::string& name, const at::Tensor& t) {
  at::Tensor& b = buffers[name];
  const bool pinned = !t.is_cpu();
  if (!b.defined() || b.sizes() != t.sizes() || b.scalar_type() != t.scalar_type() || (pinned && !b.is_pinned()))
    b = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(pinned));
  return b;
}

}  // namespace

std::vector<ShardedTensor> SnapshotStaging::stage(const std::vector<ShardedTensor>& blocks) {
  std::vector<ShardedTensor> out;
  out.reserve(blocks.size());
  std::optional<c10::Device> device;
  for (const auto& b : blocks) {
    at::Tensor& host = buffer_for(buffers_, b.name, b.local);
    if (b.local.is_cpu()) {
      host.copy_(b.local.detach());
    } else {
      if (!device) {
        device = b.local.device();
        c10::impl::VirtualGuardImpl impl(device->type());
        if (!copy_stream_) copy_stream_ = impl.getStreamFromGlobalPool(*device, /*isHighPriority=*/false);
        c10::Event produced(device->type());
        produced.record(impl.getStream(*device));  // after whatever the compute stream queued that writes it
        produced.block(*copy_stream_);
      }
      c10::StreamGuard on_copy_stream(*copy_stream_);
      b.local.record_stream(*copy_stream_);  // a temporary block is not reused before this stream read it
      host.copy_(b.local.detach(), /*non_blocking=*/true);
    }
    out.push_back({b.name, b.global_shape, b.offsets, host, b.write});
  }
  if (device) {
    copied_ = std::make_shared<c10::Event>(device->type());
    copied_->record(*copy_stream_);
    update_waits_ = true;
  } else {
    copied_.reset();
  }
  return out;
}

std::function<void()> SnapshotStaging::landed() const {
  return [e = copied_] {
    if (e) e->synchronize();
  };
}

void SnapshotStaging::before_update() {
  if (!update_waits_ || !copied_ || !copy_stream_) return;
  c10::impl::VirtualGuardImpl impl(copy_stream_->device_type());
  copied_->block(impl.getStream(copy_stream_->device()));
  update_waits_ = false;
}

}  // namespace meshtrain::train
