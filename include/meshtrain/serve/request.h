// Request: one generation asked of the serving engine, as the scheduler sees it (docs/serving.md "Scheduler").
// Sampling settings, stop strings and the text live with the engine and the server; the scheduler needs only the
// tokens and how many more it may add.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/serve/block_pool.h"

namespace meshtrain::serve {

using RequestId = uint64_t;

struct Request {
  RequestId id = 0;              // unique among the requests waiting or running
  std::vector<TokenId> prompt;   // the tokenized prompt, at least one token
  int32_t max_new_tokens = 16;   // generation stops after this many tokens at the latest
};

// Why a sequence left the scheduler (OpenAI's finish_reason).
enum class FinishReason { kStop, kLength, kAborted };

}  // namespace meshtrain::serve
