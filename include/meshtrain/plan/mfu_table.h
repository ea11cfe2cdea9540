// MfuTable: measured model-FLOPs utilisation of meshtrain's training step by model shape, the rate the step-time
// model divides FLOPs by. The built-in rows are `meshtrain bench train` on one H200 (docs/PERFORMANCE.md, fused
// kernels, no activation checkpointing); `scripts/bench/plan_check.py` measures them again and writes a table in
// the same JSON form, which `meshtrain plan --mfu FILE` reads instead:
//   [{"family": "llama", "d_model": 2048, "tokens": 16384, "mfu": 0.493, "params": 1.24e9, "step_s": 0.265,
//     "source": "...", "gpu": "h200-141gb"}, ...]   (gpu: a --gpu name, default h200-141gb)
// A shape between rows is interpolated in log2(d_model) among rows of its family (the nearest row beyond the
// ends); another GPU is assumed to reach the same fraction of its own peak.
// A row measures a whole step, which includes passes over the parameters whose time grows with the parameter
// count, not the tokens (the optimizer, the weights' casts, the gradients' accumulation: step_time.h). Where a
// row gives its model's trained parameters and its measured step time, lookup() takes those passes out, at the
// memory bandwidth of the GPU the row was measured on, and returns the MFU of the compute alone; the step-time
// model adds the planned job's own passes back at the planned GPU's bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::plan {

struct MfuRow {
  Family family;
  int64_t d_model = 0;
  int64_t tokens = 0;  // tokens per micro-batch in the measurement (micro_batch × seq_len)
  double mfu = 0;      // model FLOPs / (step time × peak)
  std::string source;  // the measurement it comes from
  double params = 0;   // the measured model's trained parameters (0: unknown, the MFU is used as it is)
  double step_s = 0;   // the measured step time (0: unknown)
  std::string gpu = "h200-141gb";  // the GPU it was measured on (plan/gpu_spec.h's name)
};

class MfuTable {
 public:
  // The rows measured in the repository (docs/PERFORMANCE.md).
  static MfuTable builtin();
  // The JSON form above; UserError naming the file and the bad entry.
  static MfuTable from_json_file(const std::string& path);

  // MFU for `m` (resolved); the row(s) it came from in `why`. `pass_bytes_per_param`: bytes a measured step
  // moved per trained parameter in its parameter passes, at `pass_efficiency` of its GPU's memory bandwidth
  // (0: the rows' MFU as measured).
  double lookup(const ModelConfig& m, std::string* why = nullptr, double pass_bytes_per_param = 0,
                double pass_efficiency = 0) const;
  const std::vector<MfuRow>& rows() const { return rows_; }

 private:
  std::vector<MfuRow> rows_;
};

}  // namespace meshtrain::plan
