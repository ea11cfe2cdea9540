// Sequence: a request inside the scheduler — its tokens so far (prompt, then what was sampled), how many of them
// have keys and values in the cache, and the blocks that hold them. Read by the engine (tokens to feed, the block
// table the attention kernel reads); changed only by the scheduler.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "meshtrain/serve/block_table.h"
#include "meshtrain/serve/request.h"

namespace meshtrain::serve {

struct Sequence {
  Sequence(Request r, int64_t arrival_order, int32_t block_size)
      : request(std::move(r)), tokens(request.prompt), arrival(arrival_order), table(block_size) {}

  Request request;
  std::vector<TokenId> tokens;  // prompt + generated
  int64_t arrival;              // order of add(): first come, first served
  int32_t num_computed = 0;     // tokens[0, num_computed) are in the cache; a preemption sets it back to 0
  int32_t num_preemptions = 0;
  BlockTable table;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_generated() const { return num_tokens() - static_cast<int32_t>(request.prompt.size()); }
  // Tokens still to compute: 1 for a sequence decoding, more while it is (re)filling the cache.
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
  bool is_decoding() const { return num_uncomputed() == 1; }
};

}  // namespace meshtrain::serve
