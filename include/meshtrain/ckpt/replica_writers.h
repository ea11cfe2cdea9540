// Who writes which replicated block of a checkpoint. A block (tensor name, offsets, shape) held by several
// ranks — a DDP replica, an HSDP shard's copies, a norm weight replicated over a tensor-parallel group — must
// be stored exactly once, and the ranks holding copies should share that work so their writes run in
// parallel instead of one rank writing everything while the others idle.
//
// assign_replica_writers exchanges every rank's block list (names, offsets, shapes, bytes; no tensor data),
// then every rank runs the same deterministic assignment on the same global picture: blocks only one rank
// holds are that rank's; each replicated block, largest first, goes to whichever of its holders has the
// fewest bytes to write so far (ties: the lowest rank). It sets `write` on each of this rank's blocks and
// ignores the value it had: the decision rests on the offsets alone, so it works for any layout.
// Identical (name, offsets, shape) must mean identical values on every holder — what replication means.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt {

// Collective over `comm` (null: a single process, everything is written). Returns this rank's bytes to write.
uint64_t assign_replica_writers(std::vector<ShardedTensor>& blocks, comm::Communicator* comm);

}  // namespace meshtrain::ckpt
