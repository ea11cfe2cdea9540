// Direct (all-pairs) algorithms: every rank exchanges with every peer in one round. Latency-friendly for
// small messages (one round trip instead of 2·(size-1) ring steps) and the natural shape of all-to-all and of
// a barrier whose timeout can name exactly the ranks that did not arrive.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>

#include "comm/cpu/transfer.h"
#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm::direct {

// Every rank sends its whole buffer to every peer and reduces all of them in rank order (fp32 accumulation for
// half types), in place on `buf`; all ranks end bitwise identical.
void all_reduce(const PeerLinks& links, void* buf, std::size_t numel, c10::ScalarType dtype, ReduceOp op,
                const OpContext& ctx);

// Root sends the buffer to every peer.
void broadcast(const PeerLinks& links, void* buf, std::size_t nbytes, int root, const OpContext& ctx);

// `out` chunk p (chunk_bytes each) receives rank p's chunk `rank` of `in`; chunk `rank` is copied locally.
void all_to_all(const PeerLinks& links, void* out, const void* in, std::size_t chunk_bytes, const OpContext& ctx);

// One byte to and from every peer.
void barrier(const PeerLinks& links, const OpContext& ctx);

}  // namespace meshtrain::comm::direct
