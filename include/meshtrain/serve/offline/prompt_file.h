// PromptFile: the JSONL input of offline generation (`meshtrain generate CKPT --input prompts.jsonl`,
// docs/serving.md "Offline generation"), read and checked whole before the model loads. Each non-blank line is a
// JSON object with `prompt` (text, or an array of token ids) or `messages` (a chat: [{role, content}], rendered
// through the model's chat template), and optionally OpenAI's `max_tokens`, `temperature`, `top_p`, `top_k`,
// `seed`, `repetition_penalty` and `stop` — parsed by the same code as the server's request bodies
// (serve/http/openai_protocol.h, which includes no Boost header) — and an `id` of any JSON type, echoed back.
// A field a line leaves out takes the command's default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/serve/engine/sampling_params.h"
#include "meshtrain/serve/http/openai_protocol.h"

namespace meshtrain::serve::offline {

// What a line that does not say gets (the command's flags).
struct PromptDefaults {
  int32_t max_tokens = 16;
  bool lower_max_tokens = false;  // max_tokens is only a cap: lowered to what fits (the command's own default)
  SamplingParams sampling;
  std::vector<std::string> stop;
};

struct PromptLine {
  int64_t line = 0;                  // 1-based, for messages naming it
  std::optional<nlohmann::json> id;  // the line's `id`, echoed in its output line
  bool chat = false;                 // `messages` rather than `prompt`
  bool lower_max_tokens = false;     // the line took a default max_tokens that may be lowered to fit
  http::CompletionRequest request;   // the prompt (text or ids) or messages, max_tokens, sampling, stop
};

// The lines in file order. UserError "PATH:LINE: ..." naming the field for a line that is not a JSON object, that
// has both or neither of `prompt` and `messages`, or a field of the wrong type or out of range; UserError naming
// the file when it cannot be read or holds no line.
std::vector<PromptLine> read_prompt_file(const std::string& path, const PromptDefaults& defaults);

}  // namespace meshtrain::serve::offline
