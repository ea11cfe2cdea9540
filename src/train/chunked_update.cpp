#include "meshtrain/train/chunked_update.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "meshtrain/core/error.h"
#include "meshtrain/train/stream_order.h"

namespace meshtrain::train {
namespace {

// Elements per host task, as the other update paths (train/offloaded_adamw.cpp) split theirs.
constexpr int64_t kSpan = int64_t{1} << 16;

}  // namespace

// A chunk's way through the host: its gradient in, its new parameter out (each `chunk_elements` fp32 values
// of storage, viewed in the chunk's dtype), the events of its two copies and its unfinished spans.
struct ChunkedUpdate::Slot {
  at::Tensor grad, out;
  Chunk chunk;
  bool busy = false;
  std::optional<c10::Event> downloaded, uploaded;
  std::mutex mu;
  std::condition_variable cv;
  int64_t spans_left = 0;

  void span_done() {
    std::lock_guard<std::mutex> lock(mu);
    if (--spans_left == 0) cv.notify_all();
  }
  void wait_spans() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return spans_left == 0; });
  }
};

ChunkedUpdate::ChunkedUpdate(c10::Device device, std::optional<c10::Stream> d2h, std::optional<c10::Stream> h2d,
                             HostWorkers& workers, int64_t chunk_elements, int slots)
    : device_(device), d2h_(d2h), h2d_(h2d), workers_(workers), chunk_elements_(chunk_elements) {
  MT_CHECK(chunk_elements > 0 && slots > 0, "ChunkedUpdate: ", slots, " slots of ", chunk_elements, " elements");
  MT_CHECK(d2h_.has_value() == h2d_.has_value(), "ChunkedUpdate: both copy streams or neither");
  // Pinned where the copies are DMAs from and to a device; fp32 storage fits a chunk of either dtype.
  const auto options = at::TensorOptions().dtype(at::kFloat).pinned_memory(d2h_.has_value());
  for (int k = 0; k < slots; ++k) {
    auto slot = std::make_unique<Slot>();
    slot->grad = at::empty({chunk_elements}, options);
    slot->out = at::empty({chunk_elements}, options);
    slots_.push_back(std::move(slot));
  }
}

ChunkedUpdate::~ChunkedUpdate() {
  if (d2h_) {
    d2h_->synchronize();
    h2d_->synchronize();
  }
}

int64_t ChunkedUpdate::host_bytes() const {
  return static_cast<int64_t>(slots_.size()) * 2 * 4 * chunk_elements_;
}

void ChunkedUpdate::run(const std::vector<Target>& targets) {
  down_ = up_ = 0;
  if (d2h_) {
    // The gradients are final and the parameters no longer read once what the compute stream holds has run.
    order_after(device_, compute_stream(device_), *d2h_);
    order_after(device_, compute_stream(device_), *h2d_);
  }
  size_t next = 0;
  for (const Target& t : targets) {
    MT_CHECK(t.param.is_contiguous() && t.param.grad().is_contiguous(),
             "ChunkedUpdate: a parameter or its gradient is not contiguous");
    const int64_t n = t.param.numel();
    for (int64_t a = 0; a < n; a += chunk_elements_) {
      Slot& slot = *slots_[next++ % slots_.size()];
      finish(slot);
      start(slot, {&t, a, std::min(chunk_elements_, n - a)});
    }
  }
  for (size_t k = 0; k < slots_.size(); ++k) finish(*slots_[(next + k) % slots_.size()]);  // oldest first
  workers_.wait_idle();  // rethrows what a span threw
  if (h2d_) order_after(device_, *h2d_, compute_stream(device_));  // the next forward reads the parameters
}

void ChunkedUpdate::start(Slot& slot, const Chunk& chunk) {
  const Target& t = *chunk.target;
  const at::ScalarType dtype = t.param.scalar_type();
  MT_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "ChunkedUpdate: parameters in ", dtype,
           "; valid fp32 or bf16");
  const at::Tensor grad = slot.grad.view(dtype).narrow(0, 0, chunk.len);
  const at::Tensor src = t.param.grad().view(-1).narrow(0, chunk.begin, chunk.len);
  down_ += static_cast<double>(chunk.len) * static_cast<double>(src.element_size());
  if (d2h_) {
    c10::StreamGuard on_copy_stream(*d2h_);
    grad.copy_(src, /*non_blocking=*/true);
    slot.downloaded.emplace(device_.type());
    slot.downloaded->record(*d2h_);
  } else {
    grad.copy_(src);
  }
  // The spans write `out`, which the slot's last upload reads, and read `grad`, which the download writes.
  if (slot.uploaded) slot.uploaded->synchronize();
  if (slot.downloaded) slot.downloaded->synchronize();
  slot.chunk = chunk;
  slot.busy = true;
  const bool bf16 = dtype == at::kBFloat16;
  const int64_t bytes = grad.element_size();
  char* g = static_cast<char*>(grad.data_ptr());
  char* o = static_cast<char*>(slot.out.data_ptr());
  float* p = t.master.data_ptr<float>() + chunk.begin;
  float* m = t.exp_avg.data_ptr<float>() + chunk.begin;
  float* v = t.exp_avg_sq.data_ptr<float>() + chunk.begin;
  const AdamWScalars s = t.scalars;
  slot.spans_left = (chunk.len + kSpan - 1) / kSpan;
  Slot* counted = &slot;
  for (int64_t a = 0; a < chunk.len; a += kSpan) {
    const int64_t len = std::min(kSpan, chunk.len - a);
    workers_.submit([=] {
      adamw_update_span_cast(p + a, g + a * bytes, m + a, v + a, len, s, bf16, o + a * bytes);
      counted->span_done();
    });
  }
}

void ChunkedUpdate::finish(Slot& slot) {
  if (!slot.busy) return;
  slot.wait_spans();
  slot.busy = false;
  const Chunk& c = slot.chunk;
  const at::Tensor& param = c.target->param;
  const at::Tensor src = slot.out.view(param.scalar_type()).narrow(0, 0, c.len);
  const at::Tensor dst = param.view(-1).narrow(0, c.begin, c.len);
  up_ += static_cast<double>(c.len) * static_cast<double>(dst.element_size());
  if (!h2d_) {
    dst.copy_(src);
    return;
  }
  c10::StreamGuard on_copy_stream(*h2d_);
  dst.copy_(src, /*non_blocking=*/true);
  slot.uploaded.emplace(device_.type());
  slot.uploaded->record(*h2d_);
}

}  // namespace meshtrain::train
