// Test hook for crash safety: MESHTRAIN_CKPT_CRASH_AT=STAGE[:RANK[:STEP]] makes the saver raise(SIGKILL) on
// itself when it reaches the named stage (on every rank, or only RANK; on every save, or only the one of
// STEP), so tests can kill a real worker at each point of the save protocol and check that what loads
// afterwards is always a complete checkpoint. Stages, in protocol order:
//   host_copy     tensors copied to host, nothing written yet
//   file_partial  this rank's file has its header and first tensor only
//   file_synced   this rank's file is complete and fsynced
//   meta_written  rank 0: meta.json written into step_N.tmp, not yet renamed
//   renamed       rank 0: step_N.tmp renamed to step_N, `latest` not yet moved
//   committed     rank 0: `latest` names step_N, older checkpoints not yet pruned
// Unset (normal runs), it costs one getenv per stage.
#pragma once

#include <cstdint>

namespace meshtrain::ckpt {

void crash_point(const char* stage, int rank, int64_t step);

}  // namespace meshtrain::ckpt
