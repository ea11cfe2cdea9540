// Fake backend: one process plays rank `rank` of a group of `size` without talking to anyone, for --dry-run
// and planning. Its model of the world: every other rank holds exactly this rank's data. So all_reduce sum
// multiplies by size (avg, max, min leave the tensor as is), all_gather repeats `in` size times,
// reduce_scatter returns this rank's chunk (× size for sum), all_to_all fills every chunk of `out` with chunk
// `rank` of `in`, broadcast/send/barrier do nothing and recv leaves its tensor unchanged. Every op checks its
// arguments exactly like the CPU backend and completes at once.
#pragma once

#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm {

// split() throws: a fake cannot know the other ranks' colors; create one fake per group instead.
CommPtr make_fake_communicator(int rank, int size);

}  // namespace meshtrain::comm
