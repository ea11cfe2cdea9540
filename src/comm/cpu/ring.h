// Ring algorithms for bandwidth-bound collectives: each rank talks only to its neighbours (left = rank-1,
// right = rank+1) and every link carries (size-1)/size of the data per phase, so all ranks stay busy.
//   reduce-scatter: size-1 steps; in step s a rank sends chunk (rank-s-1) and receives chunk (rank-s-2),
//                   reducing it into its buffer as the bytes arrive; afterwards it owns the reduced chunk `rank`.
//   all-gather:     size-1 steps; in step s a rank sends chunk (rank-s) and receives chunk (rank-s-1).
//   all-reduce:     reduce-scatter, Avg's division on the owned chunk, then all-gather; every chunk is reduced
//                   by exactly one rank, so all ranks end bitwise identical.
// Chunks are as even as possible: the first numel % size chunks hold one element more.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>

#include "comm/cpu/transfer.h"
#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm::ring {

// Element range [begin, begin + count) of chunk c when `numel` is split into `parts` chunks.
struct Chunk {
  std::size_t begin = 0;
  std::size_t count = 0;
};
Chunk chunk(std::size_t numel, int parts, int c);

// In place on `buf` (numel elements of `dtype`).
void all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                const OpContext& ctx);

// `work` (numel elements, overwritten) holds this rank's input; afterwards chunk(numel, size, rank) of it
// holds the reduction (Avg not divided).
void reduce_scatter(const PeerLinks& links, void* work, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                    const OpContext& ctx);

// `buf` (numel elements) holds this rank's chunk(numel, size, rank); afterwards it holds every chunk.
void all_gather(const PeerLinks& links, void* buf, std::size_t numel, std::size_t elem_size, const OpContext& ctx);

// Pipelined chain from `root` around the ring: each rank forwards bytes to its right as they arrive.
void broadcast(const PeerLinks& links, void* buf, std::size_t nbytes, int root, const OpContext& ctx);

}  // namespace meshtrain::comm::ring
