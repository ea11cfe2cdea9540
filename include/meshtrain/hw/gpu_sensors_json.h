// GpuSensors readings as JSON: `meshtrain doctor --save FILE` writes a node's readings, load_gpu_sensors()
// replays them (tests/fixtures/gpu_health/), so the preflight checks are testable without a GPU.
//   {"source": "...", "gpus": [{"name": "...", "pci_bus_id": "...", "ecc_uncorrected_volatile": 0, ...,
//                                "now": {"power_w": 72.5, "temperature_c": 34, ...}}]}
// Keys are GpuHealth's / GpuReading's field names; a missing key is an absent reading.
#pragma once

#include <memory>
#include <string>

#include "meshtrain/hw/gpu_sensors.h"

namespace meshtrain::hw {

// Every GPU's health (with its current reading) as JSON.
std::string gpu_sensors_to_json(const GpuSensors& sensors);
// UserError naming `name` and the key when malformed.
std::unique_ptr<GpuSensors> gpu_sensors_from_json(const std::string& text, const std::string& name);
std::unique_ptr<GpuSensors> load_gpu_sensors(const std::string& path);

}  // namespace meshtrain::hw
