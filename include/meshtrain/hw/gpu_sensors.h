// GpuSensors: what one GPU reports about itself now (power, heat, clocks, utilisation, memory, throttling)
// and about its health (ECC, retired pages / remapped rows, NVLinks, PCIe link, clock caps). The trainer's
// telemetry and `meshtrain doctor` read GPUs through this interface; nvml_sensors() is the real one (NVML
// through dlopen, hw/nvml_library.h), fixtures in tests inject readings through it (gpu_sensors_json.h).
//
// A reading NVML cannot give is absent (std::nullopt), never a made-up zero: on a machine without an
// NVIDIA driver nvml_sensors() has no GPUs and every reading is absent.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace meshtrain::hw {

// NVML's clocks-event ("throttle") reason bits, as nvmlDeviceGetCurrentClocksEventReasons reports them.
namespace throttle {
inline constexpr uint64_t kGpuIdle = 0x1, kApplicationClocks = 0x2, kSwPowerCap = 0x4, kHwSlowdown = 0x8,
                          kSyncBoost = 0x10, kSwThermal = 0x20, kHwThermal = 0x40, kHwPowerBrake = 0x80;
// The three causes telemetry names: thermal (SW or HW), power cap (SW cap or the HW power brake), HW slowdown.
inline constexpr uint64_t kThermal = kSwThermal | kHwThermal, kPowerCap = kSwPowerCap | kHwPowerBrake;
// "thermal, power cap" for the bits among the three causes that are set; "" when none is.
std::string describe(uint64_t reasons);
}  // namespace throttle

struct GpuReading {
  std::optional<double> power_w, temperature_c, sm_clock_mhz, memory_clock_mhz, gpu_util_pct, memory_util_pct;
  std::optional<int64_t> memory_used_bytes, memory_total_bytes;
  std::optional<uint64_t> throttle_reasons;  // throttle:: bits
};

struct GpuHealth {
  std::string name, pci_bus_id;
  std::optional<uint64_t> ecc_uncorrected_volatile;   // since the driver loaded
  std::optional<bool> retired_pages_pending;          // pre-A100: a page waits for retirement (reboot)
  std::optional<bool> row_remap_pending, row_remap_failed;  // A100+: the same, by row remapping
  std::optional<int> nvlinks_up, nvlinks_down;        // links answering active / inactive
  std::optional<int> pcie_width, pcie_max_width, pcie_gen, pcie_max_gen;
  std::optional<double> sm_clock_max_mhz, power_limit_w, default_power_limit_w, slowdown_temperature_c;
  GpuReading now;
};

class GpuSensors {
 public:
  virtual ~GpuSensors() = default;
  virtual int count() const = 0;
  // The GPU with this PCI bus id ("0000:07:00.0", any case or domain width), -1 when none.
  virtual int index_of(const std::string& pci_bus_id) const = 0;
  virtual GpuReading read(int index) const = 0;
  virtual GpuHealth health(int index) const = 0;
  // Where the readings come from ("nvml", "fixture PATH") or why there are none.
  virtual std::string source() const = 0;
};

// This machine's GPUs through NVML; count() 0 (source() saying why) without a usable driver. Never throws.
std::unique_ptr<GpuSensors> nvml_sensors();

}  // namespace meshtrain::hw
