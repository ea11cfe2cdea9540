// CpuAllocationCount: the bytes the CPU allocator hands out while it is in scope — alive now, and the most
// alive at once. c10 keeps no peak for CPU memory as the CUDA caching allocator does (`peak_memory_bytes`), so
// a CPU test of a peak reads this. Every allocation still goes through the real allocator: the count wraps it.
// Only allocations made while installed are counted (their frees are counted whenever they happen).
//
//   testing_support::CpuAllocationCount count;   // installed until it goes out of scope
//   build_something();
//   EXPECT_LE(count.peak(), count.now() + allowance);
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>

namespace meshtrain::testing_support {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* real) : real_(real) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = real_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    const auto bytes = static_cast<int64_t>(n);
    const int64_t alive = now_ += bytes;
    for (int64_t p = peak_; alive > p && !peak_.compare_exchange_weak(p, alive);) {
    }
    return {data, new Held{std::move(inner), bytes, this}, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  int64_t now() const { return now_; }
  int64_t peak() const { return peak_; }
  void reset() { now_ = 0, peak_ = 0; }
  void restart_peak() { peak_ = now_.load(); }

 private:
  // The real allocation, freed (and uncounted) with the tensor's storage.
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    CountingCpuAllocator* owner;
  };
  static void release(void* ctx) {
    auto* held = static_cast<Held*>(ctx);
    held->owner->now_ -= held->bytes;
    delete held;
  }

  c10::Allocator* real_;
  std::atomic<int64_t> now_{0}, peak_{0};
};

class CpuAllocationCount {
 public:
  CpuAllocationCount() : previous_(c10::GetCPUAllocator()) {
    counter().reset();
    c10::SetCPUAllocator(&counter(), kPriority);
  }
  ~CpuAllocationCount() { c10::SetCPUAllocator(previous_, kPriority); }
  CpuAllocationCount(const CpuAllocationCount&) = delete;
  CpuAllocationCount& operator=(const CpuAllocationCount&) = delete;

  int64_t now() const { return counter().now(); }
  int64_t peak() const { return counter().peak(); }
  // From here on peak() is the most alive at once since this call (what one step of a test adds at its worst).
  void restart_peak() { counter().restart_peak(); }

 private:
  static constexpr uint8_t kPriority = 100;  // above the default allocator's registration
  // Lives as long as the process: tensors counted in a scope may be freed after it ends.
  static CountingCpuAllocator& counter() {
    static auto* c = new CountingCpuAllocator(c10::GetDefaultCPUAllocator());
    return *c;
  }
  c10::Allocator* previous_;
};

}  // namespace meshtrain::testing_support
