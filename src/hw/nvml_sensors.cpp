// nvml_sensors(): GpuSensors over NVML (hw/nvml_library.h). Each reading is one NVML call; one that fails or
// that this driver lacks leaves its field absent.
#include <algorithm>
#include <cctype>
#include <vector>

#include "hw/nvml_library.h"
#include "meshtrain/core/error.h"
#include "meshtrain/hw/gpu_sensors.h"

namespace meshtrain::hw {

std::string throttle::describe(uint64_t reasons) {
  std::string out;
  auto add = [&](uint64_t bits, const char* what) {
    if (reasons & bits) out += (out.empty() ? "" : ", ") + std::string(what);
  };
  add(kThermal, "thermal");
  add(kPowerCap, "power cap");
  add(kHwSlowdown, "HW slowdown");
  return out;
}

namespace {

constexpr int kTemperatureGpu = 0, kThresholdSlowdown = 1, kClockSm = 1, kClockMem = 2;
constexpr int kUncorrected = 1, kVolatile = 0, kEnabled = 1, kFeatureEnabled = 1;

// Calls `fn(dev, &v)` when the driver has it; the value (converted by `scale`) or nullopt.
template <typename Out, typename Raw, typename Fn, typename... Args>
std::optional<Out> ask(Fn fn, nvmlDevice_t dev, double scale, Args... args) {
  if (!fn) return std::nullopt;
  Raw v{};
  if (fn(dev, args..., &v) != NVML_SUCCESS) return std::nullopt;
  return static_cast<Out>(static_cast<double>(v) * scale);
}

class NvmlSensors final : public GpuSensors {
 public:
  NvmlSensors() : nv_(NvmlLibrary::instance()) {
    unsigned n = 0;
    if (!nv_.ok() || nv_.count(&n) != NVML_SUCCESS) return;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (nv_.handle(i, &d) != NVML_SUCCESS) break;
      devs_.push_back(d);
    }
  }

  int count() const override { return static_cast<int>(devs_.size()); }

  int index_of(const std::string& bus_id) const override {
    for (int i = 0; i < count(); ++i) {
      NvmlPciInfo p{};
      if (nv_.pci && nv_.pci(devs_[static_cast<size_t>(i)], &p) == NVML_SUCCESS &&
          normal_bus_id(p.busId) == normal_bus_id(bus_id))
        return i;
    }
    return -1;
  }

  GpuReading read(int index) const override {
    GpuReading r;
    if (index < 0 || index >= count()) return r;
    nvmlDevice_t d = devs_[static_cast<size_t>(index)];
    r.power_w = ask<double, unsigned>(nv_.power_usage, d, 1e-3);
    r.temperature_c = ask<double, unsigned>(nv_.temperature, d, 1.0, kTemperatureGpu);
    r.sm_clock_mhz = ask<double, unsigned>(nv_.clock, d, 1.0, kClockSm);
    r.memory_clock_mhz = ask<double, unsigned>(nv_.clock, d, 1.0, kClockMem);
    if (NvmlUtilization u{}; nv_.utilization && nv_.utilization(d, &u) == NVML_SUCCESS) {
      r.gpu_util_pct = u.gpu;
      r.memory_util_pct = u.memory;
    }
    if (NvmlMemory m{}; nv_.memory && nv_.memory(d, &m) == NVML_SUCCESS) {
      r.memory_used_bytes = static_cast<int64_t>(m.used);
      r.memory_total_bytes = static_cast<int64_t>(m.total);
    }
    if (unsigned long long t = 0; nv_.throttle_reasons && nv_.throttle_reasons(d, &t) == NVML_SUCCESS)
      r.throttle_reasons = t;
    return r;
  }

  GpuHealth health(int index) const override {
    GpuHealth h;
    if (index < 0 || index >= count()) return h;
    nvmlDevice_t d = devs_[static_cast<size_t>(index)];
    if (char name[96] = {}; nv_.name && nv_.name(d, name, sizeof name) == NVML_SUCCESS) h.name = name;
    if (NvmlPciInfo p{}; nv_.pci && nv_.pci(d, &p) == NVML_SUCCESS) h.pci_bus_id = p.busId;
    h.ecc_uncorrected_volatile = ask<uint64_t, unsigned long long>(nv_.ecc_errors, d, 1.0, kUncorrected, kVolatile);
    if (int pending = 0; nv_.retired_pages_pending && nv_.retired_pages_pending(d, &pending) == NVML_SUCCESS)
      h.retired_pages_pending = pending == kEnabled;
    unsigned corr = 0, unc = 0, pend = 0, fail = 0;
    if (nv_.remapped_rows && nv_.remapped_rows(d, &corr, &unc, &pend, &fail) == NVML_SUCCESS) {
      h.row_remap_pending = pend != 0;
      h.row_remap_failed = fail != 0;
    }
    read_links(d, h);
    h.pcie_width = ask<int, unsigned>(nv_.pcie_width, d, 1.0);
    h.pcie_max_width = ask<int, unsigned>(nv_.pcie_max_width, d, 1.0);
    h.pcie_gen = ask<int, unsigned>(nv_.pcie_gen, d, 1.0);
    h.pcie_max_gen = ask<int, unsigned>(nv_.pcie_max_gen, d, 1.0);
    h.sm_clock_max_mhz = ask<double, unsigned>(nv_.max_clock, d, 1.0, kClockSm);
    h.power_limit_w = ask<double, unsigned>(nv_.power_limit, d, 1e-3);
    h.default_power_limit_w = ask<double, unsigned>(nv_.default_power_limit, d, 1e-3);
    h.slowdown_temperature_c = ask<double, unsigned>(nv_.temperature_threshold, d, 1.0, kThresholdSlowdown);
    h.now = read(index);
    return h;
  }

  std::string source() const override { return nv_.ok() ? "nvml" : nv_.why(); }

 private:
  // Links that answer are counted up or down; a GPU without NVLink answers none (both stay absent).
  void read_links(nvmlDevice_t d, GpuHealth& h) const {
    if (!nv_.link_state) return;
    int up = 0, down = 0;
    for (unsigned l = 0; l < kMaxNvLinks; ++l) {
      int active = 0;
      if (nv_.link_state(d, l, &active) != NVML_SUCCESS) continue;
      (active == kFeatureEnabled ? up : down) += 1;
    }
    if (up + down == 0) return;
    h.nvlinks_up = up;
    h.nvlinks_down = down;
  }

  const NvmlLibrary& nv_;
  std::vector<nvmlDevice_t> devs_;
};

}  // namespace

std::unique_ptr<GpuSensors> nvml_sensors() { return std::make_unique<NvmlSensors>(); }

}  // namespace meshtrain::hw
