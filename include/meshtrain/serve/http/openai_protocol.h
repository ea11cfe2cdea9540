// The OpenAI API's JSON for /v1/completions and /v1/chat/completions (docs/serving.md "meshtrain serve"): a
// request body parsed into what the engine needs, and the bodies and stream chunks sent back. No I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/sampling_params.h"

namespace meshtrain::serve::http {

// A request body the API refuses: HTTP 400 with OpenAI's error object; `param` names the field, if one.
class BadRequest : public UserError {
 public:
  BadRequest(const std::string& message, std::string param = "") : UserError(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

struct CompletionRequest {
  std::optional<std::string> prompt_text;             // `prompt` as text: tokenized by the server
  std::vector<TokenId> prompt_ids;                    // `prompt` as token ids
  std::vector<std::pair<std::string, std::string>> messages;  // chat: (role, content)
  int32_t max_tokens = 16;
  SamplingParams sampling;
  bool stream = false;
  std::vector<std::string> stop;                      // `stop`: up to 4 strings that end the generation
  std::optional<std::string> model;                   // `model`, when given: the routes check it names theirs
};

// BadRequest naming the field for a body that is not a JSON object, a field of the wrong type, or a value out of
// range; unknown fields are ignored (as OpenAI's clients send some this server does not use).
CompletionRequest parse_completion_request(std::string_view body);
CompletionRequest parse_chat_request(std::string_view body);

// {"error": {"message", "type": "invalid_request_error", "param", "code": null}}
std::string error_body(const std::string& message, const std::string& param, const std::string& type);

// OpenAI's finish_reason for a finished request.
const char* finish_reason_name(FinishReason reason);

// JSON text with invalid UTF-8 replaced (a sampled token may end mid-character).
std::string dump(const nlohmann::json& j);

}  // namespace meshtrain::serve::http
