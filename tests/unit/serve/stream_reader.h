// Reads a RequestStream to its end, as an HTTP handler does: every token, then the last part (its finish, error).
#pragma once

#include <utility>
#include <vector>

#include "meshtrain/serve/engine/request_stream.h"

namespace meshtrain::serve::testing {

inline std::pair<std::vector<TokenId>, StreamPart> read_to_end(RequestStream& s) {
  std::vector<TokenId> tokens;
  for (;;) {
    StreamPart p = s.next();
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
    if (p.finish) return {tokens, p};
  }
}

}  // namespace meshtrain::serve::testing
