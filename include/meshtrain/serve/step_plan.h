// StepPlan: what one engine step computes (docs/serving.md "Scheduler"). Each chunk is a run of a sequence's
// tokens whose keys and values the step writes into the sequence's blocks; a chunk that reaches the sequence's
// last token also samples the next token, which the caller reports back through Scheduler::on_tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/serve/request.h"

namespace meshtrain::serve {

struct Chunk {
  RequestId id = 0;
  int32_t start = 0;       // first position computed: the sequence's computed tokens before the step
  int32_t num_tokens = 0;  // positions [start, start + num_tokens)
  bool samples = false;    // ends at the sequence's last token: the step samples one token for it
};

struct StepPlan {
  std::vector<Chunk> decodes;          // one token each, a sampled token each; first in the batch
  std::vector<Chunk> prefills;         // prompt chunks, and whole recomputes of preempted sequences
  std::vector<RequestId> preempted;    // sent back to waiting by this step: their blocks were freed

  int32_t num_tokens() const {
    int32_t n = 0;
    for (const Chunk& c : decodes) n += c.num_tokens;
    for (const Chunk& c : prefills) n += c.num_tokens;
    return n;
  }
  bool empty() const { return decodes.empty() && prefills.empty(); }
};

}  // namespace meshtrain::serve
