// Text → byte-level token shards (`meshtrain prepare`): every byte of the UTF-8 text is one token (vocab 256),
// so any text trains without a tokenizer. The last `val_fraction` of the text (cut at a line break) becomes
// the validation shard.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::data {

struct PrepareResult {
  std::string train_path, val_path;
  int64_t train_tokens = 0, val_tokens = 0;
};

// Writes <out_prefix>_train.bin and <out_prefix>_val.bin (llm.c format). Throws UserError for an unreadable
// or empty input, or a val_fraction outside [0, 0.5].
PrepareResult prepare_bytes(const std::string& text_path, const std::string& out_prefix, double val_fraction);

}  // namespace meshtrain::data
