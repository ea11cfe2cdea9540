// MfuTable: measured model-FLOPs utilisation of meshtrain's training step by model shape, the rate the step-time
// model divides FLOPs by. The built-in rows are `meshtrain bench train` on one H200 (docs/PERFORMANCE.md, fused
// kernels, no activation checkpointing); `scripts/bench/plan_check.py` measures them again and writes a table in
// the same JSON form, which `meshtrain plan --mfu FILE` reads instead:
//   [{"family": "llama", "d_model": 2048, "tokens": 16384, "mfu": 0.493, "source": "..."}, ...]
// A shape between rows is interpolated in log2(d_model) among rows of its family (the nearest row beyond the
// ends); another GPU is assumed to reach the same fraction of its own peak.
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
};

class MfuTable {
 public:
  // The rows measured in the repository (docs/PERFORMANCE.md).
  static MfuTable builtin();
  // The JSON form above; UserError naming the file and the bad entry.
  static MfuTable from_json_file(const std::string& path);

  // MFU for `m` (resolved); the row(s) it came from in `why`.
  double lookup(const ModelConfig& m, std::string* why = nullptr) const;
  const std::vector<MfuRow>& rows() const { return rows_; }

 private:
  std::vector<MfuRow> rows_;
};

}  // namespace meshtrain::plan
