// Shared-memory all-reduce for a communicator whose ranks all live on one host (every peer reached through a
// Unix socket). Each rank owns a memfd staging area that it passes to its peers over the Unix sockets
// (SCM_RIGHTS: no names in /dev/shm, nothing to clean up if a rank dies), and every rank maps all of them.
//
// Why: the ring moves 2·(n-1)/n of the buffer through the kernel per rank, each byte copied into and out of
// a socket buffer with a wake-up per step; here each byte is copied into shared memory once, reduced by its
// owner straight from the peers' pages, and copied out once. With 4 ranks on 2 cores that halves the memory
// traffic and removes most context switches (docs/comm.md has the figures).
//
// Algorithm, per segment of at most segment_bytes (three staging slots rotate, so one barrier per segment):
//   step t: barrier; copy_out(t-1); reduce(t); copy_in(t+1)
//   copy_in(k):  this rank's segment k → its slot k%3 (slots continue rotating from one op to the next)
//   reduce(k):   its slice r of segment k = op over ranks 0..n-1 (in that order, fp32 accumulation for half
//                types) of their slot k%3 slice r, written in place into its own slot (reduce_many)
//   copy_out(k): every rank's reduced slice of segment k → the caller's buffer
// Hazards: a slot is rewritten (copy_in(t+1), slot (t-2)%3) only after every rank has passed barrier t, i.e.
// finished copy_out(t-2); reduce(t) writes only the slice no other rank reads. Barriers are one byte to and
// from every peer over the sockets, so they carry the op's timeout and notice a dead peer like any other op.
// Results are bitwise identical on every rank (each element is reduced once, in rank order).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/cpu/transfer.h"
#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm {

class ShmArena {
 public:
  // 256 KiB: 3 slots × 4 ranks stay near the L2/L3 working set; larger segments measured slower and noisier
  // on the 2-core CI VM, smaller ones add barriers (docs/comm.md).
  static constexpr std::size_t kDefaultSegmentBytes = std::size_t(256) << 10;
  static constexpr int kSlots = 3;

  // Collective over `links` (all peers must be Unix-socket connected): creates this rank's area of kSlots
  // segments, exchanges the descriptors, maps every rank's area. `segment_bytes` must be equal on every rank.
  static std::unique_ptr<ShmArena> create(const PeerLinks& links, const OpContext& ctx,
                                          std::size_t segment_bytes = kDefaultSegmentBytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  std::size_t segment_bytes() const { return segment_; }
  char* slot(int rank, int s) const { return maps_[static_cast<std::size_t>(rank)] + static_cast<std::size_t>(s) * segment_; }

  // In place on `buf` (numel elements of `dtype`), every rank of `links` calling it.
  void all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                  const OpContext& ctx);

 private:
  ShmArena() = default;
  std::size_t segment_ = kDefaultSegmentBytes;
  std::vector<char*> maps_;  // per rank, kSlots × segment_ bytes each; munmap'ed in the destructor
  std::uint64_t first_ = 0;  // slot of the next op's first segment (mod kSlots)
};

}  // namespace meshtrain::comm
