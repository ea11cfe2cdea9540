// The preflight's checks of a node (`meshtrain doctor`, `meshrun --preflight`): each a row of one table
// with what was found, what was expected, and whether it passes; a failing row makes the command exit 1 so
// that a Slurm prolog can drain the node. The GPU checks read GpuSensors (NVML, or a fixture in tests), the
// storage check a directory; the all-reduce row is added by the caller (it needs a communicator).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/hw/gpu_sensors.h"
#include "meshtrain/hw/topology.h"

namespace meshtrain::hw {

enum class CheckStatus { Pass, Fail, Skip };

struct CheckRow {
  std::string check, found, expected;
  CheckStatus status = CheckStatus::Pass;
};

struct NodeExpectations {
  int gpus = -1;                   // GPUs the run needs; -1: at least one
  std::string gpu_model;           // a substring of every GPU's name ("H100"); empty: all alike
  int nvlinks = -1;                // active NVLinks per GPU; -1: the same on every GPU
  double temperature_margin_c = 10;  // below the slowdown threshold (85 °C where NVML has none)
};

// GPU count and model, ECC / retired pages / remapped rows, NVLinks up, PCIe link width, clocks not capped
// (power limit below default, throttling other than idle), temperature. Without GPUs and no count asked
// for: one skipped row saying why.
std::vector<CheckRow> check_gpus(const GpuSensors& sensors, const NodeExpectations& want);

// Free space and write rate of `dir` (created if missing) against a checkpoint of `checkpoint_bytes`: the
// free space must hold two (a new one is complete before the oldest is pruned), the rate must write one in
// `max_write_s`. Writes and fsyncs a probe file of `probe_bytes`, then removes it.
CheckRow check_checkpoint_dir(const std::string& dir, int64_t checkpoint_bytes, double max_write_s,
                              int64_t probe_bytes = 256 << 20);

// The all-reduce bus bandwidth (GB/s) `gpus` GPUs of this node reach at a large size, as nccl-tests measure
// it, for the links between them: NVLink/NVSwitch by GPU generation (B200 700, H100/H200 360, A100 230,
// V100 130), else PCIe (15); `why` names the link.
struct BusBandwidth {
  double gbs = 0;
  std::string why;
};
BusBandwidth expected_allreduce_busbw(const Topology& topo, int gpus, const std::string& gpu_name);
// Passes at ≥ 75 % of the expected rate (nccl-tests' spread between healthy nodes is well inside that).
CheckRow check_allreduce_busbw(double measured_gbs, const BusBandwidth& expected);

// The table; the first failing row, if any, repeated last as "FAILED: <check>: found …, expected …".
std::string format_check_table(const std::vector<CheckRow>& rows);
bool all_passed(const std::vector<CheckRow>& rows);

}  // namespace meshtrain::hw
