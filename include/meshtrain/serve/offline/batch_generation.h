// Offline batch generation (`meshtrain generate CKPT --input prompts.jsonl --output out.jsonl`, docs/serving.md
// "Offline generation"): every line of a prompt file through serve::generate_all at once — continuous batching
// over the paged KV cache, as `meshtrain serve` runs requests — and one JSON line per input line back, in input
// order: `id` (when the line has one), `index`, `text`, `token_ids`, `finish_reason`, `usage`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/offline/model_text.h"
#include "meshtrain/serve/offline/prompt_file.h"

namespace meshtrain::serve::offline {

// What every request must fit (from the checkpoint's config and the cache's settings).
struct BatchLimits {
  int64_t vocab_size = 0;   // token ids below it
  int64_t max_seq_len = 0;  // prompt + max_tokens − 1 positions at most
  int64_t cache_tokens = 0;  // num_blocks × block_size: one request alone must fit
  std::string cache_source;  // where cache_tokens comes from, for the refusal ("serve.blocks × serve.block_size")
};

// The lines' requests in order (request id = index in `lines`): text through the tokenizer with its special
// tokens (bytes when byte-level), chats through the chat template, ids as given. UserError "PATH:LINE: ..." for a
// prompt that encodes to nothing, has an id outside the vocabulary, or does not fit the model or the cache.
std::vector<GenerationRequest> encode_prompts(const std::vector<PromptLine>& lines, const ModelText& model_text,
                                              const std::string& path, const BatchLimits& limits);

// `requests` (encode_prompts' of `lines`) fitted again to `limits`, for a cache sized after they were encoded, without
// encoding them again: a line's default max_tokens lowered anew from the line's own, every request checked.
// UserError as encode_prompts gives it.
void fit_prompts(std::vector<GenerationRequest>& requests, const std::vector<PromptLine>& lines,
                 const std::string& path, const BatchLimits& limits);

// Runs `requests` (encode_prompts' of `lines`) to completion and returns the output JSONL. A stop string ends its
// request at the token that completes it (`text` ends before the match; that token is the last of `token_ids`);
// an end-of-text token ends it too (kept in `token_ids`, not in `text`). `options.on_step` sees the progress;
// its `eos_tokens` and `stop_at` are set here.
std::string generate_batch(model::Transformer& model, const std::vector<PromptLine>& lines,
                           const std::vector<GenerationRequest>& requests, const ModelText& model_text,
                           GenerateOptions options);

}  // namespace meshtrain::serve::offline
