// StepTelemetry: at every logged step, each rank's step time, compute time (the step less the time spent
// waiting for other ranks, comm/wait_clock.h) and its GPU's readings (hw/gpu_sensors.h) gathered to every
// rank in one small all-gather — a few floats per rank every logging.every steps, so it costs nothing next
// to a step. From them: the metrics record's "ranks", "gpu" and "nodes" entries, the console line's node
// temperature and power, a warning naming each throttling GPU's rank and cause, and one naming the slowest
// rank when its compute time exceeds the median by more than logging.straggler_threshold.
//
// Readings NVML cannot give are absent from the record (never zeros); without a GPU there is no "gpu" entry.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/hw/gpu_sensors.h"

namespace meshtrain::train {

struct Straggler {
  int rank = -1;
  double seconds = 0, median = 0;  // its compute time, and the median over ranks
  double excess() const { return median > 0 ? seconds / median - 1 : 0; }
};

// The slowest rank when it exceeds the median of `seconds` by more than `threshold` (a fraction); none for
// fewer than two ranks or a threshold ≤ 0.
std::optional<Straggler> find_straggler(const std::vector<double>& seconds, double threshold);

class StepTelemetry {
 public:
  struct Options {
    int rank = 0, world_size = 1, local_world_size = 1;
    bool gpu_readings = true;          // logging.gpu_telemetry
    std::string pci_bus_id;            // this rank's GPU; empty: no GPU (no readings)
    double straggler_threshold = 0.2;  // logging.straggler_threshold
  };
  // `sensors` null: nvml_sensors() when a GPU is given.
  StepTelemetry(Options o, comm::CommPtr comm, std::unique_ptr<hw::GpuSensors> sensors = nullptr);

  struct Summary {
    nlohmann::json record;       // "ranks", "gpu" (when any rank has readings), "nodes", "straggler"
    std::string console;         // " | 71°C max, 5620 W" (empty without readings)
    std::vector<std::string> warnings;  // throttling GPUs, a straggler
  };
  // Collective (every rank, every logged step). Summary on every rank; the caller logs it on rank 0.
  Summary gather(int64_t step, double step_s, double compute_s);

 private:
  std::vector<float> local_values(double step_s, double compute_s) const;

  Options o_;
  comm::CommPtr comm_;
  std::unique_ptr<hw::GpuSensors> sensors_;
  int gpu_index_ = -1;
};

// Test hook: MESHTRAIN_SLOW_RANK=RANK:MS makes RANK sleep MS milliseconds at the start of every step, so a
// multi-process test can check that the step log names it. Unset, it costs nothing after the first call.
void slow_rank_delay(int rank);

}  // namespace meshtrain::train
